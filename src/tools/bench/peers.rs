//! Running pyttb's sparse MTTKRP beside ours on the same tensor and factors, in one
//! run on one machine: factors go out as model files ([`crate::model_io::write_factors`],
//! read with `numpy.loadtxt`), `scripts/peer_mttkrp.py` times `sptensor.mttkrp` on every
//! mode and writes its results as `.npy` plus `timings.json`, which come back here.

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::model_io::write_factors;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What one run of the peer script measured and computed.
#[derive(Debug, Clone, PartialEq)]
pub struct PyttbRun {
    /// Median over repetitions of the all-mode loop, seconds.
    pub all_modes_median_s: f64,
    /// Fastest repetition of the all-mode loop, seconds.
    pub all_modes_min_s: f64,
    /// Median seconds per mode.
    pub per_mode_median_s: Vec<f64>,
    /// pyttb's result per mode (FP64).
    pub results: Vec<Matrix<f64>>,
    /// pyttb's version.
    pub pyttb_version: String,
    /// numpy's version.
    pub numpy_version: String,
}

/// A Python interpreter that can `import pyttb`: `$SPTMC_PYTHON` when set, else
/// `<root>/.venv/bin/python`, then `python3` on `PATH`; the reasons when none can.
pub fn find_python(root: &Path) -> std::result::Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match std::env::var_os("SPTMC_PYTHON") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec![root.join(".venv/bin/python"), PathBuf::from("python3")],
    };
    let mut why = Vec::new();
    for py in candidates {
        match Command::new(&py).args(["-c", "import pyttb"]).output() {
            Ok(o) if o.status.success() => return Ok(py),
            Ok(_) => why.push(format!("{} cannot import pyttb", py.display())),
            Err(e) => why.push(format!("{}: {e}", py.display())),
        }
    }
    Err(why.join("; "))
}

/// Reads a 2-D little-endian float64 `.npy` file in C order (what the peer script
/// writes) as a matrix.
pub fn read_npy(path: &Path) -> Result<Matrix<f64>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |reason: &str| Error::BadBinary {
        path: path.to_path_buf(),
        reason: format!("npy: {reason}"),
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("no NUMPY magic"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(&format!("unknown version {v}"))),
    };
    let header = bytes
        .get(start..start + header_len)
        .map(String::from_utf8_lossy)
        .ok_or_else(|| bad("header runs past the end"))?;
    if !header.contains("'descr': '<f8'") {
        return Err(bad("not little-endian float64"));
    }
    if !header.contains("'fortran_order': False") {
        return Err(bad("not C order"));
    }
    let shape = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad("shape is not numeric")))
        .collect::<Result<_>>()?;
    let (rows, cols) = match dims[..] {
        [r, c] => (r, c),
        [r] => (r, 1),
        _ => return Err(bad(&format!("expected 2 dimensions, got {}", dims.len()))),
    };
    let body = &bytes[start + header_len..];
    if body.len() != rows * cols * 8 {
        return Err(bad(&format!(
            "{} data bytes for a {rows}×{cols} matrix",
            body.len()
        )));
    }
    let data = body
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("chunks of 8")))
        .collect();
    Matrix::new(rows, cols, data)
}

/// Runs `script` (`scripts/peer_mttkrp.py`) with `python` on `tensor` and `factors`
/// (all of rank `rank`), timing `reps` repetitions of the all-mode loop, and reads
/// back its timings and results. `work` receives `factors/` and `out/`.
#[allow(clippy::too_many_arguments)]
pub fn run_pyttb_mttkrp(
    python: &Path,
    script: &Path,
    tensor: &Path,
    factors: &[Matrix],
    rank: usize,
    seed: u64,
    reps: usize,
    work: &Path,
) -> Result<PyttbRun> {
    let fdir = work.join("factors");
    let odir = work.join("out");
    write_factors(&fdir, factors)?;
    let out = Command::new(python)
        .arg(script)
        .arg(tensor)
        .args(["--rank", &rank.to_string(), "--seed", &seed.to_string()])
        .args(["--reps", &reps.to_string()])
        .arg("--factors")
        .arg(&fdir)
        .arg("--out")
        .arg(&odir)
        .output()
        .map_err(|e| Error::io(python, e))?;
    if !out.status.success() {
        return Err(Error::io(
            script,
            std::io::Error::other(format!(
                "{} exited with {}: {}",
                python.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        ));
    }
    let tpath = odir.join("timings.json");
    let text = std::fs::read_to_string(&tpath).map_err(|e| Error::io(&tpath, e))?;
    let j: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::BadBinary {
        path: tpath.clone(),
        reason: e.to_string(),
    })?;
    let num = |k: &str| {
        j[k].as_f64().ok_or_else(|| Error::BadBinary {
            path: tpath.clone(),
            reason: format!("no number {k}"),
        })
    };
    let per_mode_median_s = j["per_mode_median_s"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default();
    let results = (0..factors.len())
        .map(|m| read_npy(&odir.join(format!("mttkrp-{m}.npy"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(PyttbRun {
        all_modes_median_s: num("all_modes_median_s")?,
        all_modes_min_s: num("all_modes_min_s")?,
        per_mode_median_s,
        results,
        pyttb_version: j["pyttb"].as_str().unwrap_or("unknown").to_string(),
        numpy_version: j["numpy"].as_str().unwrap_or("unknown").to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(header: &str, data: &[f64]) -> Vec<u8> {
        let mut h = header.to_string();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        data.iter().for_each(|v| b.extend(v.to_le_bytes()));
        b
    }

    #[test]
    fn npy_round_trip_and_rejections() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        let ok = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
        std::fs::write(&p, npy(ok, &[1.0, 2.0, 3.0, 4.0, 5.0, -6.5])).unwrap();
        let m = read_npy(&p).unwrap();
        assert_eq!(m.shape(), (2, 3));
        assert_eq!(m.row(1), &[4.0, 5.0, -6.5]);
        std::fs::write(&p, npy(ok, &[1.0, 2.0])).unwrap();
        assert!(matches!(read_npy(&p), Err(Error::BadBinary { .. })));
        let f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }";
        std::fs::write(&p, npy(f4, &[1.0])).unwrap();
        assert!(matches!(read_npy(&p), Err(Error::BadBinary { .. })));
        std::fs::write(&p, b"not numpy").unwrap();
        assert!(matches!(read_npy(&p), Err(Error::BadBinary { .. })));
    }
}
