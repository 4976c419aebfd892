#!/usr/bin/env bash
# A virtual environment with TorchRec for the CPU baseline (bench/torchrec_dlrm.py),
# installed from PyPI: torch 2.14.1 + fbgemm-gpu-cpu 1.9.0 + torchrec 1.9.2.
#
#   bash bench/torchrec_env.sh            # creates/updates .venv-torchrec at the repo root
#   VENV=/some/where bash bench/torchrec_env.sh
#   TORCHREC_ENV_MODE=full bash bench/torchrec_env.sh
#
# Why these versions: fbgemm-gpu-cpu 1.9.0 (newest CPU-only FBGEMM on PyPI) is built
# against torch 2.14 (its own compatibility table: fbgemm 1.9 <-> torch 2.14), and
# torchrec 1.9.x goes with fbgemm 1.9. torch 2.15.0 has no matching FBGEMM yet.
#
# Why --no-deps everywhere: torchrec's wheel requires `fbgemm-gpu` (the CUDA build);
# we install `fbgemm-gpu-cpu` (same `fbgemm_gpu` module) instead. And PyPI's Linux
# x86_64 torch is a CUDA 13.0 build (+cu130, 555 MB wheel) that requires ~2.3 GB of
# nvidia-*/triton wheels. It cannot import without the CUDA libraries it is linked
# against, even on a CPU-only machine, but it does not need them all from PyPI:
#   mode minimal (tried first): torch --no-deps + the four CUDA libraries that the
#     machine image's CUDA 13.0 toolkit (/usr/local/cuda-13.0, on the loader path)
#     lacks or has too old: nvidia-cufile, nvidia-cusparselt-cu13, nvidia-nvshmem-cu13,
#     nvidia-nccl-cu13 (~450 MB of wheels). cuBLAS, cuDNN, cuFFT, ... come from the image.
#   mode full (fallback, or TORCHREC_ENV_MODE=full): every CUDA dependency torch 2.14.1
#     declares, pinned (~2.3 GB more), for a machine without a CUDA 13 toolkit.
# Nothing here runs CUDA; torch.cuda.is_available() is False and training is on CPU.
#
# Idempotent: an existing venv that already passes the check is left as it is.
# Writes `pip freeze` of the venv to bench/results/torchrec-env-freeze.txt.
# Exits non-zero with a message when the environment cannot be made to work.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv-torchrec}"
MODE="${TORCHREC_ENV_MODE:-auto}"        # auto | minimal | full
FREEZE="$ROOT/bench/results/torchrec-env-freeze.txt"

TORCH=2.14.1
FBGEMM=1.9.0
TORCHREC=1.9.2
# torch's pure-Python requirements, pinned (what pip resolved for torch 2.14.1 on 2026-11-28)
TORCH_PY_DEPS=(filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0
               networkx==3.6.1 jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0
               setuptools==84.2.1 numpy==2.4.6)
# torchrec's requirements other than fbgemm-gpu, pinned, with theirs
TORCHREC_DEPS=(torchmetrics==1.0.3 lightning-utilities==0.15.3 packaging==26.4
               tensordict==0.15.3 pyvers==0.2.3 cloudpickle==3.1.3 tqdm==4.70.1
               pyre-extensions==0.0.32 typing-inspect==0.9.0 mypy-extensions==1.2.0)
# the CUDA libraries missing from (or too old in) this machine image's /usr/local/cuda-13.0
CUDA_MINIMAL=(nvidia-cufile==1.15.1.6 nvidia-cusparselt-cu13==0.8.1
              nvidia-nvshmem-cu13==3.4.5 nvidia-nccl-cu13==2.30.7)
# everything torch 2.14.1 declares for Linux (cuda-toolkit[...]==13.0.3 expanded)
CUDA_FULL=("${CUDA_MINIMAL[@]}" nvidia-cudnn-cu13==9.24.0.43 nvidia-cublas==13.1.1.3
           nvidia-cuda-cupti==13.0.85 nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96
           nvidia-cufft==12.0.0.61 nvidia-curand==10.4.0.35 nvidia-cusolver==12.0.4.66
           nvidia-cusparse==12.6.3.3 nvidia-nvtx==13.0.85 nvidia-nvjitlink==13.5.37
           cuda-toolkit==13.0.3.0 cuda-bindings==13.5.0 cuda-pathfinder==1.9.1 triton==3.8.0)

die() { echo "torchrec_env.sh: ERROR: $*" >&2; exit 1; }
log() { echo "torchrec_env.sh: $*"; }

pick_python() {
    local c v
    for c in python3 /usr/bin/python3 python3.11; do
        command -v "$c" >/dev/null 2>&1 || continue
        v="$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || continue
        case "$v" in
            3.10|3.11|3.12|3.13)
                "$c" -c 'import venv, ensurepip' >/dev/null 2>&1 && { echo "$c"; return 0; } ;;
        esac
    done
    return 1
}

# The check: versions as pinned, imports, an FBGEMM CPU op, a TorchRec DLRM forward and
# backward with a fused row-wise Adagrad table on CPU, and gloo.
check() {
    "$VENV/bin/python" - "$TORCH" "$FBGEMM" "$TORCHREC" <<'EOF'
import sys, warnings
warnings.filterwarnings("ignore")
want_torch, want_fbgemm, want_torchrec = sys.argv[1:4]
import torch, fbgemm_gpu, torchrec
from importlib.metadata import version
got = (torch.__version__.split("+")[0], version("fbgemm-gpu-cpu"), version("torchrec"))
if got != (want_torch, want_fbgemm, want_torchrec):
    sys.exit(f"versions {got} != wanted {(want_torch, want_fbgemm, want_torchrec)}")
import torch.distributed as dist
assert dist.is_gloo_available(), "gloo is not available"
assert torch.ops.fbgemm.asynchronous_complete_cumsum(torch.tensor([1, 2, 3])).tolist() == [0, 1, 3, 6]
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from torchrec.models.dlrm import DLRM
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    SplitTableBatchedEmbeddingBagsCodegen, ComputeDevice, EmbeddingLocation)
from fbgemm_gpu.split_embedding_configs import EmbOptimType
tbe = SplitTableBatchedEmbeddingBagsCodegen(
    [(10, 4, EmbeddingLocation.HOST, ComputeDevice.CPU)],
    optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
out = tbe(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 3]))
out.sum().backward()
ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(
    name="t", embedding_dim=4, num_embeddings=10, feature_names=["f"])])
m = DLRM(embedding_bag_collection=ebc, dense_in_features=3,
         dense_arch_layer_sizes=[8, 4], over_arch_layer_sizes=[4, 1])
kjt = KeyedJaggedTensor.from_lengths_sync(keys=["f"], values=torch.tensor([1, 2]),
                                          lengths=torch.tensor([1, 1]))
m(torch.rand(2, 3), kjt).sum().backward()
print(f"check ok: torch {torch.__version__} (cuda available: {torch.cuda.is_available()}), "
      f"fbgemm-gpu-cpu {got[1]}, torchrec {got[2]}, python {sys.version.split()[0]}")
EOF
}

pip_nd() { "$VENV/bin/pip" install --no-deps --progress-bar off --disable-pip-version-check -q "$@"; }

write_freeze() {
    mkdir -p "$(dirname "$FREEZE")"
    {
        echo "# pip freeze of $VENV, written by bench/torchrec_env.sh on $(date -u +%FT%TZ)"
        echo "# mode: $1; python: $("$VENV/bin/python" --version 2>&1); venv size: $(du -sh "$VENV" | cut -f1)"
        echo "# installed with --no-deps (pip check will report torch's uninstalled CUDA packages in mode minimal)"
        "$VENV/bin/pip" freeze --disable-pip-version-check
    } > "$FREEZE"
    log "wrote $FREEZE"
}

# --- venv
if [ ! -x "$VENV/bin/python" ]; then
    PY="$(pick_python)" || die "no python3 (3.10-3.13) with the venv module found (tried python3, /usr/bin/python3, python3.11)"
    log "creating $VENV with $PY ($("$PY" --version 2>&1))"
    "$PY" -m venv "$VENV" || die "python3 -m venv $VENV failed"
fi
# keep the venv out of git (the repo's .gitignore does not list it)
[ -f "$VENV/.gitignore" ] || echo '*' > "$VENV/.gitignore"

if [ -f "$VENV/.torchrec-env-mode" ] && check 2>/dev/null; then
    log "already set up ($(cat "$VENV/.torchrec-env-mode")); nothing installed"
    write_freeze "$(cat "$VENV/.torchrec-env-mode")"
    exit 0
fi

log "installing torch $TORCH (--no-deps), fbgemm-gpu-cpu $FBGEMM, torchrec $TORCHREC (--no-deps) and pinned pure-Python deps"
pip_nd "torch==$TORCH" "${TORCH_PY_DEPS[@]}" \
    || die "pip could not install torch==$TORCH (needs PyPI; a cp310-cp313 manylinux_2_28 x86_64 wheel)"
pip_nd "fbgemm-gpu-cpu==$FBGEMM" "torchrec==$TORCHREC" "${TORCHREC_DEPS[@]}" \
    || die "pip could not install fbgemm-gpu-cpu==$FBGEMM / torchrec==$TORCHREC or their deps"

used=""
if [ "$MODE" = auto ] || [ "$MODE" = minimal ]; then
    log "mode minimal: CUDA libraries from PyPI only where the machine's CUDA 13 toolkit lacks them: ${CUDA_MINIMAL[*]}"
    pip_nd "${CUDA_MINIMAL[@]}" || die "pip could not install ${CUDA_MINIMAL[*]}"
    if err="$(check 2>&1)"; then
        echo "$err"; used=minimal
    else
        echo "$err" | tail -3 >&2
        [ "$MODE" = minimal ] && die "mode minimal does not import/run here (see above); try TORCHREC_ENV_MODE=full"
        log "mode minimal failed (above); falling back to mode full"
    fi
fi
if [ -z "$used" ]; then
    log "mode full: every CUDA package torch $TORCH declares (~2.3 GB of wheels)"
    pip_nd "${CUDA_FULL[@]}" || die "pip could not install torch's CUDA dependencies"
    if err="$(check 2>&1)"; then
        echo "$err"; used=full
    else
        echo "$err" | tail -5 >&2
        die "torch $TORCH + fbgemm-gpu-cpu $FBGEMM + torchrec $TORCHREC does not import/run on this machine even with all of torch's CUDA packages (see above)"
    fi
fi
echo "$used" > "$VENV/.torchrec-env-mode"
log "ok (mode $used); venv size $(du -sh "$VENV" | cut -f1)"
write_freeze "$used"
