"""The servers' update rules by name, with the hyper-parameters each takes (keyword
arguments of Worker.declare_dense/declare_sparse; formulas in docs/algorithms.md). The
C++ TableSpec::Validate checks the values; this checks the names.
"""

from . import _core
from .errors import InvalidArgumentError

_R = _core.UpdateRule

# name -> (enum value, hyper-parameters it takes besides lr)
RULES = {
    "sum": (_R.SUM, ()),
    "sgd": (_R.SGD, ()),
    "momentum": (_R.MOMENTUM, ("momentum",)),
    "nesterov": (_R.NESTEROV, ("momentum",)),
    "adagrad": (_R.ADAGRAD, ("epsilon",)),
    "rowwise_adagrad": (_R.ROWWISE_ADAGRAD, ("epsilon",)),  # sparse tables only
    "adam": (_R.ADAM, ("beta1", "beta2", "epsilon")),
    "ftrl": (_R.FTRL, ("l1", "l2", "ftrl_beta")),
    "elastic": (_R.ELASTIC, ("elastic_alpha",)),
}
# Every hyper-parameter of some rule, in TableSpec's order.
HYPER = ("momentum", "beta1", "beta2", "epsilon", "l1", "l2", "ftrl_beta", "elastic_alpha")
# Other names accepted for them (torch's and FBGEMM's).
ALIASES = {"eps": "epsilon"}


def set_rule(spec, rule, hyper):
    """Sets spec.rule to the rule named ``rule`` and its hyper-parameters from ``hyper``
    (a dict of keyword arguments). InvalidArgumentError for an unknown rule, an unknown
    keyword, or a hyper-parameter the rule does not take."""
    if rule not in RULES:
        raise InvalidArgumentError(f"rule must be one of {sorted(RULES)}, not {rule!r}")
    value, takes = RULES[rule]
    given = {}
    for k, v in hyper.items():
        name = ALIASES.get(k, k)
        if name not in HYPER:
            raise InvalidArgumentError(f"unknown table option {k!r} (known: {', '.join(HYPER)}, "
                                       f"{', '.join(f'{a} for {n}' for a, n in ALIASES.items())})")
        if name not in takes:
            known = (() if rule in ("sum", "elastic") else ("lr",)) + takes
            raise InvalidArgumentError(f"rule {rule!r} takes no {k!r} (it takes "
                                       f"{', '.join(known) or 'no hyper-parameter'})")
        if name in given:
            raise InvalidArgumentError(f"{name!r} given twice (as {k!r} and {given[name][0]!r})")
        given[name] = (k, v)
    spec.rule = value
    for name, (k, v) in given.items():
        try:
            setattr(spec, name, float(v))
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{k} must be a number, not {v!r}") from None
