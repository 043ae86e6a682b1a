# Sourced by the build scripts: the venv whose torch Tandem builds against
# (scripts/setup.sh makes it), passed to CMake as the Python to ask.
TANDEM_VENV=${TANDEM_VENV:-$PWD/.venv}
TANDEM_PYTHON=$TANDEM_VENV/bin/python
if [[ ! -x "$TANDEM_PYTHON" ]]; then
  echo "tandem: no venv at $TANDEM_VENV; run scripts/setup.sh first" >&2
  exit 1
fi
TANDEM_TORCH_CMAKE_ARGS=(-DPython3_EXECUTABLE="$TANDEM_PYTHON")
