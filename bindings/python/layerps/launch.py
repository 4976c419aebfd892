"""Run a LayerPS cluster on this machine: ``python -m layerps.launch -s 2 -w 2 -- CMD ARGS``.

It behaves exactly like the bundled ``layerps-launch`` (which it runs, with the short
flags translated): a scheduler, the servers and N copies of CMD with LAYERPS_SCHEDULER,
LAYERPS_TOKEN, LAYERPS_NUM_SERVERS, LAYERPS_NUM_WORKERS, LAYERPS_ROLE and
LAYERPS_RANK set; output prefixed by role; exit status 0 only when every worker
succeeded. Any ``--flag`` of layerps-launch passes through (see ``--help``).
"""

import os
import sys

from .cluster import bin_dir, tool_path

_SHORT = {"-s": "--num_servers", "-w": "--num_workers", "-t": "--timeout_s"}
_LONG_ALIASES = {"--servers": "--num_servers", "--workers": "--num_workers",
                 "--num-servers": "--num_servers", "--num-workers": "--num_workers"}

USAGE = """usage: python -m layerps.launch [-s M] [-w N] [-t SECONDS] [--FLAG=VALUE ...] -- CMD [ARGS...]

  -s, --num_servers M   servers to start (default 1)
  -w, --num_workers N   copies of CMD to start (default 1)
  -t, --timeout_s S     stop everything and fail after S seconds
  --FLAG=VALUE          any other flag of layerps-launch (python -m layerps.launch --help-launch)
"""


def translate(argv):
    """layerps-launch's argument list for our argv (without the program name)."""
    out = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            return out
        if not a.startswith("-"):
            # The command starts without a "--": pass it on after one.
            out.append("--")
            out.extend(argv[i:])
            return out
        name, eq, value = a.partition("=")
        name = _SHORT.get(name, _LONG_ALIASES.get(name, name))
        if name in _SHORT.values() and not eq:
            if i + 1 >= len(argv):
                raise SystemExit(f"layerps.launch: {a} needs a value\n\n{USAGE}")
            value = argv[i + 1]
            i += 1
            eq = "="
        out.append(name + eq + value if eq else name)
        i += 1
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if argv and argv[0] == "--help-launch":
        argv = ["--help"]
    exe = tool_path("layerps-launch")
    args = translate(argv)
    if not any(a.startswith("--bin_dir") for a in args) and os.path.isdir(bin_dir()):
        args.insert(0, "--bin_dir=" + os.path.dirname(exe))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + args)


if __name__ == "__main__":
    sys.exit(main())
