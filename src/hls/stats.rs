//! Statistics an HLS build reports (cf. the HLS paper's Table IV).

use super::values::{QuantReport, ValueChoice, ValueType};

/// What a build produced and what it cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HlsStats {
    /// Nonzeros stored (after summing duplicates).
    pub nnz: usize,
    /// Input entries merged into others because their coordinates repeated.
    pub duplicates_summed: usize,
    /// Tile threshold used.
    pub threshold: u32,
    /// Non-empty 16³ tiles (0 when the tensor has no tiles: order ≠ 3).
    pub tiles: usize,
    /// Tiles with at least `threshold` nonzeros.
    pub dense_tiles: usize,
    /// Nonzeros in dense tiles.
    pub dense_nnz: usize,
    /// Nonzeros in the sparse part.
    pub sparse_nnz: usize,
    /// Blocks of the sparse part.
    pub sparse_blocks: usize,
    /// Bytes of the dense part.
    pub dense_bytes: usize,
    /// Bytes of the sparse part.
    pub sparse_bytes: usize,
    /// Bytes if every nonzero were in the sparse part.
    pub all_sparse_bytes: usize,
    /// Bytes if every non-empty tile were dense (0 without tiles).
    pub all_dense_bytes: usize,
    /// Bytes of COO with u32 indices and f32 values.
    pub coo_bytes: usize,
    /// How the values' type was chosen.
    pub value_choice: ValueChoice,
    /// The type the values are stored in.
    pub values: ValueType,
    /// Bytes of this HLS form with fp16 values.
    pub f16_bytes: usize,
    /// Bytes of this HLS form with f32 values.
    pub f32_bytes: usize,
    /// What fp16 storage would lose, and what the stored values lost.
    pub quant: QuantReport,
    /// Squared Frobenius norm of the values as stored (times the scale, summed in
    /// f64): the norm that matches what the kernels compute with, which a fit must use.
    pub norm_sq: f64,
}

impl HlsStats {
    /// Share of nonzeros in dense tiles.
    pub fn dense_share(&self) -> f64 {
        if self.nnz == 0 {
            0.0
        } else {
            self.dense_nnz as f64 / self.nnz as f64
        }
    }

    /// Bytes of the whole HLS tensor.
    pub fn hls_bytes(&self) -> usize {
        self.dense_bytes + self.sparse_bytes
    }

    /// The values' type, why, and what each type costs.
    pub fn value_report(&self) -> ValueReport {
        ValueReport::new(
            (self.values, self.value_choice),
            self.quant.f16_inexact,
            (self.f16_bytes, self.f32_bytes),
        )
    }

    /// The values' type and why, as the first line of a command says it: `fp16 exact`,
    /// `f32: N values not exact in fp16`, or which type was asked for.
    pub fn value_note(&self) -> String {
        value_note(self.value_choice, self.values, self.quant.f16_inexact)
    }

    /// HLS bytes over COO bytes.
    pub fn bytes_vs_coo(&self) -> f64 {
        self.hls_bytes() as f64 / self.coo_bytes.max(1) as f64
    }
}

/// The values' type `ty`, chosen by `choice`, and why, with `n` values not exact in
/// fp16 ([`HlsStats::value_note`]).
fn value_note(choice: ValueChoice, ty: ValueType, n: usize) -> String {
    match (choice, ty) {
        (ValueChoice::Auto, ValueType::F16) => "fp16 exact".into(),
        (ValueChoice::Auto, ValueType::F32) => format!("f32: {n} values not exact in fp16"),
        (_, ValueType::F16) if n == 0 => "fp16 (asked for; exact)".into(),
        (_, ValueType::F16) => format!("fp16 (asked for; {n} values not exact)"),
        (_, ValueType::F32) => "f32 (asked for)".into(),
    }
}

/// How a tensor's values are stored and why, as a run reports it (`--json`'s `values`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ValueReport {
    /// The stored type.
    #[serde(rename = "type")]
    pub value_type: ValueType,
    /// How it was chosen.
    pub choice: ValueChoice,
    /// Why, in words ([`HlsStats::value_note`]).
    pub why: String,
    /// Nonzero values that fp16 does not hold exactly after the scale.
    pub f16_inexact: usize,
    /// Bytes of the HLS form with fp16 values.
    pub f16_bytes: usize,
    /// Bytes of the HLS form with f32 values.
    pub f32_bytes: usize,
}

impl ValueReport {
    /// The report of values stored as `ty`, chosen by `choice`, with `f16_inexact` of
    /// them not exact in fp16, and the form's bytes with fp16 and with f32 values.
    pub fn new(
        (ty, choice): (ValueType, ValueChoice),
        f16_inexact: usize,
        (f16_bytes, f32_bytes): (usize, usize),
    ) -> ValueReport {
        ValueReport {
            value_type: ty,
            choice,
            why: value_note(choice, ty, f16_inexact),
            f16_inexact,
            f16_bytes,
            f32_bytes,
        }
    }

    /// The report of a tensor built in parts (an MPI rank's block each) from the
    /// parts' `reports`: the type they all chose, their counts and bytes summed; `None`
    /// where they chose different types (each part's report then says its own) or
    /// there are none.
    pub fn of_parts(reports: &[ValueReport]) -> Option<ValueReport> {
        let first = reports.first()?;
        let same = |r: &&ValueReport| (r.value_type, r.choice) == (first.value_type, first.choice);
        if !reports.iter().all(|r| same(&r)) {
            return None;
        }
        let sum = |f: fn(&ValueReport) -> usize| reports.iter().map(f).sum::<usize>();
        Some(ValueReport::new(
            (first.value_type, first.choice),
            sum(|r| r.f16_inexact),
            (sum(|r| r.f16_bytes), sum(|r| r.f32_bytes)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_stored_alike_add_up_and_parts_stored_otherwise_do_not() {
        let part = |ty, n, bytes| ValueReport::new((ty, ValueChoice::Auto), n, (bytes, 2 * bytes));
        let a = part(ValueType::F32, 3, 10);
        let b = part(ValueType::F32, 4, 20);
        let both = ValueReport::of_parts(&[a.clone(), b]).unwrap();
        assert_eq!(both, part(ValueType::F32, 7, 30));
        assert_eq!(both.why, "f32: 7 values not exact in fp16");
        assert_eq!(
            ValueReport::of_parts(std::slice::from_ref(&a)),
            Some(a.clone())
        );
        assert_eq!(ValueReport::of_parts(&[]), None);
        let exact = part(ValueType::F16, 0, 5);
        assert_eq!(ValueReport::of_parts(&[a.clone(), exact]), None);
        let asked = ValueReport::new((ValueType::F32, ValueChoice::F32), 3, (10, 20));
        assert_eq!(ValueReport::of_parts(&[a, asked]), None);
    }
}
