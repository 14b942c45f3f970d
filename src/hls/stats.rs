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
            self.quant,
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
    /// What the values lost as stored ([`QuantReport`]: the worst relative error, the
    /// values subnormal or rounded to zero, integers rounded, values small enough for
    /// the kernels to lose).
    pub precision: QuantReport,
}

impl ValueReport {
    /// The report of values stored as `ty`, chosen by `choice`, with what they lost
    /// (`quant`), and the form's bytes with fp16 and with f32 values.
    pub fn new(
        (ty, choice): (ValueType, ValueChoice),
        quant: QuantReport,
        (f16_bytes, f32_bytes): (usize, usize),
    ) -> ValueReport {
        ValueReport {
            value_type: ty,
            choice,
            why: value_note(choice, ty, quant.f16_inexact),
            f16_inexact: quant.f16_inexact,
            f16_bytes,
            f32_bytes,
            precision: quant,
        }
    }

    /// What a front end warns of, a sentence each (the command line prints them as
    /// `sptmc: warning: …` lines, Python raises them as `RuntimeWarning`s): values that
    /// lost precision in storage, integers rounded, a worst error where fp16 was asked
    /// for, values small enough for the f32 kernels to lose.
    pub fn warnings(&self) -> Vec<String> {
        let (q, ty) = (&self.precision, self.value_type.name());
        let mut out = Vec::new();
        if q.lost_precision() {
            out.push(format!(
                "{ty} storage: {} values subnormal (reduced precision), {} rounded to zero \
                 (lost); worst relative error {:.2e}",
                q.subnormal, q.flushed_to_zero, q.max_rel_err
            ));
        }
        if q.integers_inexact > 0 {
            out.push(format!(
                "{} integer values are not held exactly in {ty} storage: stored rounded \
                 (worst relative error {:.2e}), so a count model reads them rounded",
                q.integers_inexact, q.max_rel_err
            ));
        } else if self.choice == ValueChoice::F16 && q.f16_inexact > 0 && !q.lost_precision() {
            out.push(format!(
                "fp16 storage as asked: {} values not exact, worst relative error {:.2e}",
                q.f16_inexact, q.max_rel_err
            ));
        }
        if q.kernel_underflow() {
            out.push(format!(
                "{} values below {:.1e} ({} of them below {:.1e}): the f32 kernels flush \
                 results under {:.1e} to zero, so their products with factor entries partly \
                 or wholly vanish; multiply the tensor by a power of two to keep them",
                q.kernel_tiny,
                super::values::KERNEL_TINY,
                q.kernel_flushed,
                f32::MIN_POSITIVE,
                f32::MIN_POSITIVE
            ));
        }
        out
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
        let quant = (reports.iter().map(|r| r.precision)).reduce(QuantReport::merge)?;
        Some(ValueReport::new(
            (first.value_type, first.choice),
            quant,
            (sum(|r| r.f16_bytes), sum(|r| r.f32_bytes)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_stored_alike_add_up_and_parts_stored_otherwise_do_not() {
        let quant = |n| QuantReport {
            f16_inexact: n,
            ..QuantReport::default()
        };
        let part =
            |ty, n, bytes| ValueReport::new((ty, ValueChoice::Auto), quant(n), (bytes, 2 * bytes));
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
        let asked = ValueReport::new((ValueType::F32, ValueChoice::F32), quant(3), (10, 20));
        assert_eq!(ValueReport::of_parts(&[a, asked]), None);
    }

    /// Each loss is a sentence of its own, naming the stored type; values that lose
    /// nothing give none.
    #[test]
    fn warnings_name_what_the_stored_values_lost() {
        let build = |values: &[f64], choice| {
            let entries: Vec<(Vec<u32>, f64)> = (values.iter().enumerate())
                .map(|(i, &v)| (vec![i as u32, 0, 0], v))
                .collect();
            let x =
                crate::tensor::CooTensor::from_entries(vec![values.len(), 1, 1], entries).unwrap();
            let hls = crate::hls::HlsBuilder::new(u32::MAX)
                .with_values(choice)
                .build(&x)
                .unwrap();
            hls.stats().value_report()
        };
        assert_eq!(
            build(&[1.0, 2.0, 3.0], ValueChoice::Auto).warnings(),
            Vec::<String>::new()
        );
        // Counts past 2^24: f32 rounds the odd ones.
        let counts = build(&[16_777_217.0, 298_893_071.0, 4.0], ValueChoice::Auto);
        assert_eq!(counts.value_type, ValueType::F32);
        assert_eq!(counts.precision.integers_inexact, 2);
        let w = counts.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("2 integer values are not held exactly in f32 storage"),
            "{w:?}"
        );
        // fp16 asked for: its worst error, within fp16's 2^-11.
        let asked = build(&[0.1, 0.7, 1.3], ValueChoice::F16);
        let w = asked.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("fp16 storage as asked: 3 values not exact"),
            "{w:?}"
        );
        assert!(asked.precision.max_rel_err > 0.0 && asked.precision.max_rel_err <= 2f64.powi(-11));
        // A value lost to zero in f32 beside values near 1: named as f32's loss, and
        // as one the kernels lose.
        let lost = build(&[1.5, 1e-50, 0.3], ValueChoice::Auto);
        let w = lost.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("f32 storage: 0 values subnormal"), "{w:?}");
        assert!(w[0].contains("1 rounded to zero"), "{w:?}");
        assert!(w[1].starts_with("1 values below 7.9e-31"), "{w:?}");
    }
}
