#!/usr/bin/env bash
# The Python package's CI (called by .ci/run; runs alone too): fmt and clippy of the
# extension crate, the wheel built as `pip install ./python` builds it (abi3; release
# unless SPTMC_WHEEL_PROFILE=dev), installed into a clean virtual environment, its stubs
# checked against the module and its pytest suite run against the installed wheel. Honours SPTMC_REQUIRE_DATA /
# SPTMC_REQUIRE_PYTTB (set by .ci/run) and CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== python: fmt and clippy of the extension crate"
# The extension is a member of the library's workspace: the same target folder, so that
# the two builds share the library and its dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
(cd python && cargo fmt -- --check && cargo clippy --all-targets -- -D warnings)

echo "== python: the wheel (pip's PEP 517 build, as 'pip install ./python' does)"
# SPTMC_WHEEL_PROFILE=dev (as .ci/run sets it) builds the wheel with Cargo's dev profile,
# whose dependencies the test build has compiled already: the release build compiles
# every dependency again, about 6 of CI's minutes. Unset, the wheel is what pip builds
# for a user, a release build.
profile="${SPTMC_WHEEL_PROFILE:-release}"
case "$profile" in
    release) unset MATURIN_PEP517_ARGS ;;
    dev) export MATURIN_PEP517_ARGS="--profile dev" ;;
    *) echo "SPTMC_WHEEL_PROFILE must be release or dev, not '$profile'" >&2; exit 2 ;;
esac
rm -rf python/dist
python3 -m venv --clear .venv-ci-build
.venv-ci-build/bin/pip install --quiet --upgrade pip
.venv-ci-build/bin/pip wheel --quiet --no-deps --wheel-dir python/dist ./python
ls python/dist

echo "== python: the wheel in a clean virtual environment, its stubs and its pytest suite"
python3 -m venv --clear .venv-ci-py
.venv-ci-py/bin/pip install --quiet python/dist/sptmc-*.whl pytest pyttb mypy sparse
# Run from the repository root: python/ on sys.path would import the source folder
# python/sptmc instead of the installed wheel.
SPTMC_WHEEL_PROFILE="$profile" .venv-ci-py/bin/python - <<'PY'
import os, sptmc, sys
assert "site-packages" in sptmc.__file__, sptmc.__file__
wanted = os.environ["SPTMC_WHEEL_PROFILE"]
assert sptmc._sptmc.DEBUG_BUILD == (wanted == "dev"), f"the wheel must be a {wanted} build"
print("installed:", sptmc.__file__, sptmc.__version__, file=sys.stderr)
PY
.venv-ci-py/bin/python -m mypy.stubtest sptmc
.venv-ci-py/bin/pytest -q python/tests
