# Sourced (from the repository root) by the side-by-side peer scripts, compare-cp.sh
# and compare-tucker.sh: pyttb in .venv (installed when missing), 2 threads for every
# side's libraries, a release build; sets `bin` to the sptmc binary.
if ! .venv/bin/python -c "import pyttb" 2>/dev/null; then
    python3 -m venv .venv && .venv/bin/pip install --quiet pyttb
fi
export RAYON_NUM_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2
cargo build --release --quiet
bin=target/release/sptmc
