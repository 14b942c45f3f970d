"""The command line and the Python package run models through one driver: the same
bad options get the same message, word for word, from both.

The command line is the ``sptmc`` binary of this checkout (``$SPTMC_CLI``, else the
newer of ``target/debug/sptmc`` and ``target/release/sptmc`` under
``$CARGO_TARGET_DIR`` or the repository's ``target``). Without one the test is skipped
with the reason; under ``SPTMC_REQUIRE_DATA=1`` or ``CI`` (CI runs ``cargo test``,
which builds it, first) that is a failure.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sptmc

from conftest import random_coo

REPO = Path(__file__).resolve().parents[2]
SHAPE = (12, 10, 8)
NNZ = 200


def cli_binary() -> Path:
    given = os.environ.get("SPTMC_CLI")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    found = [p for p in (target / "debug" / "sptmc", target / "release" / "sptmc") if p.is_file()]
    if not found:
        why = f"no sptmc binary in {target}/debug or {target}/release (cargo build makes one)"
        if os.environ.get("SPTMC_REQUIRE_DATA") == "1" or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return max(found, key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tensor as a .tns file and as read by Python, and initial-factor folders."""
    d = tmp_path_factory.mktemp("front-ends")
    subs, vals = random_coo(SHAPE, NNZ, seed=4)
    path = d / "x.tns"
    with open(path, "w") as f:
        for s, v in zip(subs, vals):
            f.write(" ".join(str(i + 1) for i in s) + f" {v}\n")
    rng = np.random.default_rng(5)
    inits = {
        "wrong-shape": [rng.random((SHAPE[0], 3)), rng.random((SHAPE[1], 2)), rng.random((SHAPE[2], 3))],
        "zero": [rng.random((SHAPE[0], 3)), np.zeros((SHAPE[1], 3)), rng.random((SHAPE[2], 3))],
    }
    for name, factors in inits.items():
        (d / name).mkdir()
        for m, a in enumerate(factors):
            np.savetxt(d / name / f"factor-{m}.txt", a)
    return {"file": path, "dir": d, "X": sptmc.read(path, cache=False), "inits": inits}


def cli_error(args: list, cwd: Path) -> str:
    """The one error line of ``sptmc ARGS`` (which must fail with status 1), without
    its ``sptmc: error: `` prefix."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cwd / "cache"))
    o = subprocess.run(
        [str(cli_binary()), *args, "--backend", "cpu", "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert o.returncode == 1, (args, o.returncode, o.stderr)
    errors = [l for l in o.stderr.splitlines() if l.startswith("sptmc: error: ")]
    assert len(errors) == 1, (args, o.stderr)
    return errors[0][len("sptmc: error: "):]


# (what, command-line arguments after the file, the Python call, words the message has)
CASES = [
    ("rank 0", ["cp", "--rank", "0"], lambda X, i: sptmc.cp_als(X, 0, backend="cpu"),
     "rank must be at least 1, got 0"),
    ("iters 0", ["cp", "--rank", "2", "--iters", "0"],
     lambda X, i: sptmc.cp_als(X, 2, iters=0, backend="cpu"), "iters must be at least 1, got 0"),
    ("negative tol", ["cp", "--rank", "2", "--tol=-1"],
     lambda X, i: sptmc.cp_als(X, 2, tol=-1.0, backend="cpu"), "tol must be a number ≥ 0"),
    ("rank over nnz", ["cp", "--rank", str(NNZ + 1)],
     lambda X, i: sptmc.cp_als(X, NNZ + 1, backend="cpu"), f"exceeds the tensor's {NNZ} nonzeros"),
    ("init of the wrong shape", ["cp", "--rank", "3", "--init", "wrong-shape"],
     lambda X, i: sptmc.cp_als(X, 3, init=i["wrong-shape"], backend="cpu"),
     "initial factor of mode 1: expected 10×3, got 10×2"),
    ("all-zero init", ["cp", "--rank", "3", "--init", "zero"],
     lambda X, i: sptmc.cp_als(X, 3, init=i["zero"], backend="cpu"), "mode 1 is all zero"),
    ("Tucker negative tol", ["tucker", "--ranks", "2,2,2", "--tol=-0.5"],
     lambda X, i: sptmc.tucker_hooi(X, [2, 2, 2], tol=-0.5, backend="cpu"), "got -0.5"),
    ("Tucker iters 0", ["tucker", "--ranks", "2,2,2", "--iters", "0"],
     lambda X, i: sptmc.tucker_hooi(X, 2, iters=0, backend="cpu"), "iters must be at least 1"),
    ("Tucker zero rank", ["tucker", "--ranks", "2,0,2"],
     lambda X, i: sptmc.tucker_hooi(X, [2, 0, 2], backend="cpu"), "ranks[1] must be at least 1, got 0"),
    ("Tucker ranks of the wrong count", ["tucker", "--ranks", "2,2"],
     lambda X, i: sptmc.tucker_hooi(X, [2, 2], backend="cpu"), "2 ranks for a tensor of order 3"),
    ("Tucker rank over a mode's length", ["tucker", "--ranks", "2,5,9"],
     lambda X, i: sptmc.tucker_hooi(X, [2, 5, 9], backend="cpu"), "mode's length 8"),
]


@pytest.mark.parametrize("what, args, call, words", CASES, ids=[c[0] for c in CASES])
def test_the_same_bad_options_get_the_same_message(setup, what, args, call, words):
    cmd = [args[0], str(setup["file"]), *args[1:]]
    if "--init" in cmd:
        k = cmd.index("--init") + 1
        cmd[k] = str(setup["dir"] / cmd[k])
    from_cli = cli_error(cmd, setup["dir"])
    with pytest.raises(sptmc.InputError) as e:
        call(setup["X"], setup["inits"])
    from_python = str(e.value)
    assert words in from_python, (what, from_python)
    assert from_cli == from_python, what
