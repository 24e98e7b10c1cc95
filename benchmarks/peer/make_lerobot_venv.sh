#!/usr/bin/env bash
# Make the venv that runs LeRobot 0.6.1 itself beside replaybuf (the peer section of the benchmarks).
#
#   bash benchmarks/peer/make_lerobot_venv.sh [VENV]      (default: benchmarks/peer/.venv-lerobot)
#
# VENV may also come from $LEROBOT_VENV; the Python from $PYTHON312 (default: the newest
# ~/.pyenv/versions/3.12.*/bin/python3.12, else python3.12 on PATH).  Re-running on an existing venv
# only installs what is missing.  Needs the network to PyPI (and Debian's packages when ffmpeg is
# absent); prints the venv's size and the time taken.
#
# What goes in, and why:
# * lerobot==0.6.1 with --no-deps.  Its metadata pins torch<2.12 / torchvision<0.27 and drags in
#   cmake, opencv, gymnasium...; we install torch 2.13 (the project's torch) and only what
#   ``from lerobot.datasets.lerobot_dataset import LeRobotDataset`` imports.
# * torch 2.13.0 + torchvision 0.28.0 (lerobot.datasets.io_utils imports torchvision) + torchcodec
#   0.13.0 (torchcodec 0.N goes with torch 2.N).  On Python 3.12 PyPI's torch is the CUDA build
#   (several GB); it runs on the CPU.  /etc/xdg/pip may cap torch at 2.14.1: 2.13.0 is under it.
# * The dataset extra's deps within lerobot 0.6.1's own ranges (datasets, pandas, pyarrow, av,
#   jsonlines) and the core deps on the import path (numpy, pillow, huggingface-hub, draccus, einops,
#   packaging, termcolor, tqdm, safetensors -- lerobot.optim imports it --, gymnasium --
#   lerobot.envs.configs imports it).
# * FFmpeg's shared libraries for torchcodec (Debian's ffmpeg package): apt-get when missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-${LEROBOT_VENV:-$here/.venv-lerobot}}"
start=$(date +%s)

py="${PYTHON312:-}"
if [[ -z "$py" ]]; then
    py="$(ls -d "$HOME"/.pyenv/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)"
    [[ -z "$py" ]] && py="$(command -v python3.12 || true)"
fi
if [[ -z "$py" || ! -x "$py" ]]; then
    echo "make_lerobot_venv: no Python 3.12 found (set PYTHON312=/path/to/python3.12)" >&2
    exit 1
fi

if ! command -v ffmpeg >/dev/null 2>&1; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "make_lerobot_venv: ffmpeg is missing and we are not root: install Debian's ffmpeg package" >&2
        exit 1
    fi
    echo "== apt-get install ffmpeg (torchcodec needs FFmpeg's shared libraries)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "== venv $venv from $py"
    "$py" -m venv "$venv"
fi
# pip install, quiet, without the resolver's complaint that lerobot 0.6.1 asks for other torch/
# opencv/cmake versions (we chose so, above); any other message and pip's exit code come through.
pipi() {
    local log rc=0
    log="$(mktemp)"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@" >"$log" 2>&1 || rc=$?
    grep -v "^ERROR: pip's dependency resolver does not currently\|^lerobot 0.6.1 requires\|^WARNING: Location 'file:" "$log" || true
    rm -f "$log"
    return "$rc"
}

echo "== torch 2.13.0, torchvision 0.28.0, torchcodec 0.13.0"
pipi torch==2.13.0 torchvision==0.28.0 torchcodec==0.13.0 "numpy>=2.0.0,<2.3.0" "pillow>=10.0.0,<13.0.0"
echo "== lerobot 0.6.1 (no deps)"
pipi --no-deps lerobot==0.6.1
echo "== the deps of LeRobotDataset's import path (lerobot 0.6.1's ranges)"
pipi \
    "numpy>=2.0.0,<2.3.0" "pillow>=10.0.0,<13.0.0" \
    "datasets>=4.8.0,<5.0.0" "pandas>=2.0.0,<3.0.0" "pyarrow>=21.0.0,<30.0.0" "av>=15.0.0,<16.0.0" \
    "jsonlines>=4.0.0,<5.0.0" "huggingface-hub>=1.6.0,<2.0.0" "draccus>=0.11.6,<0.12.0" \
    "einops>=0.8.0,<0.9.0" "packaging>=24.2,<26.0" "termcolor>=2.4.0,<4.0.0" "tqdm>=4.66.0,<5.0.0" \
    "safetensors>=0.4.3,<1.0.0" "gymnasium>=1.1.1,<2.0.0"

echo "== check: LeRobotDataset imports and torchcodec loads FFmpeg"
(cd / && HF_HUB_OFFLINE=1 "$venv/bin/python" -c "
import importlib.metadata as md
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
from lerobot.utils.import_utils import get_safe_default_video_backend
assert get_safe_default_video_backend() == 'torchcodec', 'torchcodec cannot load FFmpeg'
print('   ', ', '.join(f'{p} {md.version(p)}' for p in ('lerobot', 'torch', 'torchcodec', 'av', 'datasets')))
")
"$venv/bin/python" -m pip freeze --disable-pip-version-check > "$venv/peer-freeze.txt"
echo "== done in $(( $(date +%s) - start )) s: $(du -sh "$venv" | cut -f1) in $venv"
