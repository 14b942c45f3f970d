//! A completion model's folder, as `sptmc complete --out` writes it and `sptmc
//! predict` and Python read it:
//!
//! - `factor-<m>.txt`: the `I_m × R` factor of mode `m` ([`crate::model_io`]'s text);
//! - `bias-<m>.txt`: mode `m`'s `I_m` biases, one a line (format 2, models with biases);
//! - `model.json`: `kind` `"completion"`, `format`, `dims`, `offset`, `solver`,
//!   `biases` (whether the bias files are there) and whatever the run reported.
//!
//! Format 1 (no `format` field) had no biases; it still loads. A format newer than
//! [`FORMAT`] is refused by name.

use super::{CompletionModel, Solver};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::model_io::{read_factors, read_matrix, write_model};
use serde_json::{Value, json};
use std::path::Path;

/// The format written: 2 (biases).
pub const FORMAT: u64 = 2;

/// Writes `model` into the folder `dir` (whole or not at all), with `summary` (an
/// object) as `model.json`, to which the fields the reader needs are added.
pub fn write(dir: &Path, model: &CompletionModel, summary: &Value) -> Result<()> {
    let mut summary = summary.clone();
    let Some(obj) = summary.as_object_mut() else {
        return Err(Error::InvalidOption(
            "a completion model's summary must be a JSON object".into(),
        ));
    };
    obj.insert("kind".into(), json!("completion"));
    obj.insert("format".into(), json!(FORMAT));
    obj.insert("dims".into(), json!(model.dims()));
    obj.insert("offset".into(), json!(model.offset));
    obj.insert("solver".into(), json!(model.solver.name()));
    obj.insert("rank".into(), json!(model.rank()));
    obj.insert("biases".into(), json!(!model.biases.is_empty()));
    let biases: Vec<(String, String, Matrix<f64>)> = model
        .biases
        .iter()
        .enumerate()
        .map(|(m, b)| {
            Matrix::new(b.len(), 1, b.clone())
                .map(|mat| (format!("bias-{m}.txt"), format!("biases of mode {m}"), mat))
        })
        .collect::<Result<_>>()?;
    let matrices: Vec<(&str, String, Matrix<f64>)> = biases
        .iter()
        .map(|(n, h, m)| (n.as_str(), h.clone(), m.clone()))
        .collect();
    write_model(dir, &model.factors, &matrices, &summary)
}

/// Reads a model folder written by [`write()`] (format 1 or 2).
pub fn read(dir: &Path) -> Result<CompletionModel> {
    let path = dir.join("model.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let bad = |why: String| Error::InvalidOption(format!("{}: {why}", path.display()));
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    if v["kind"] != "completion" {
        return Err(bad(format!(
            "kind is {}, not \"completion\" (write the model with `sptmc complete --out`)",
            v["kind"]
        )));
    }
    let format = match &v["format"] {
        Value::Null => 1,
        f => f
            .as_u64()
            .ok_or_else(|| bad(format!("format {f} is not a version number")))?,
    };
    if format > FORMAT {
        return Err(bad(format!(
            "format {format} is newer than this sptmc reads ({FORMAT}): update sptmc"
        )));
    }
    let dims: Vec<usize> =
        serde_json::from_value(v["dims"].clone()).map_err(|e| bad(format!("dims: {e}")))?;
    let offset = v["offset"]
        .as_f64()
        .ok_or_else(|| bad("no numeric offset".into()))?;
    let solver: Solver =
        serde_json::from_value(v["solver"].clone()).map_err(|e| bad(format!("solver: {e}")))?;
    let factors = read_factors(dir, dims.len())?;
    for (m, (f, &d)) in factors.iter().zip(&dims).enumerate() {
        if f.rows() != d {
            return Err(Error::shape(
                format!("factor-{m}.txt rows (dims in model.json)"),
                d,
                f.rows(),
            ));
        }
    }
    let biases = if format >= 2 && v["biases"] == true {
        (0..dims.len())
            .map(|m| {
                let b = read_matrix(&dir.join(format!("bias-{m}.txt")))?;
                if b.cols() != 1 || b.rows() != dims[m] {
                    return Err(Error::shape(
                        format!("bias-{m}.txt (dims in model.json, one value a line)"),
                        format!("{}×1", dims[m]),
                        format!("{}×{}", b.rows(), b.cols()),
                    ));
                }
                Ok(b.into_data())
            })
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let mut model = CompletionModel::from_parts(solver, offset, factors, biases)?;
    if let Some(l) = v["lambda"].as_f64() {
        model.lambda = l;
    }
    Ok(model)
}
