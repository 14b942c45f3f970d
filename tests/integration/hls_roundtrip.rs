//! `.tns` → COO → HLS → COO is exact up to the rounding of the values to their stored
//! type: coordinates identical, every value equal to its stored form (fp16 or f32 after
//! the scale). Also the bit linearization for
//! every mode width, including keys wider than 64 bits.

use crate::common;

use approx::assert_relative_eq;
use common::{shared_data, shared_files};
use proptest::prelude::*;
use sptmc::CooTensor;
use sptmc::hls::values::{F16_MIN_NORMAL, F16_UNIT_ROUNDOFF};
use sptmc::hls::{HlsBuilder, HlsTensor, KeyLayout, LOW_KEY_BITS, StoredValue, ValueType};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::tns;
use std::collections::BTreeSet;

/// Checks that `h` holds exactly the (sorted, unique) tensor `x`, values rounded to
/// their stored type.
fn assert_exact(x: &CooTensor, h: &HlsTensor, what: &str) {
    assert!(x.is_sorted_unique());
    let y = h.to_coo();
    assert_eq!(y.dims(), x.dims(), "{what}");
    assert_eq!(y.nnz(), x.nnz(), "{what}");
    for m in 0..x.order() {
        assert_eq!(y.indices(m), x.indices(m), "{what}: mode {m}");
    }
    let s = h.scale();
    let stored = |v: f64| match h.value_type() {
        ValueType::F16 => half::f16::store(v, s).to_f64() * s as f64,
        ValueType::F32 => f32::store(v, s).to_f64() * s as f64,
    };
    for (&v, &back) in x.values().iter().zip(y.values()) {
        assert_eq!(back, stored(v), "{what}: value {v}");
        // Values in fp16's normal range after scaling keep fp16's relative precision.
        if (v / s as f64).abs() >= F16_MIN_NORMAL {
            assert_relative_eq!(back, v, max_relative = F16_UNIT_ROUNDOFF);
        }
    }
    let st = h.stats();
    assert_eq!(st.dense_nnz + st.sparse_nnz, x.nnz(), "{what}");
}

// The generator's block-dense pattern, as the HLS builder sees it.
#[test]
fn block_dense_tiles_hold_the_asked_density() {
    let spec = GenSpec {
        dims: vec![160, 160, 160],
        nnz: 20_000,
        pattern: Pattern::BlockDense {
            tile_nnz: 200,
            dense_share: 0.5,
        },
        seed: 3,
    };
    let x = generate(&spec).unwrap();
    let h = HlsBuilder::new(150).build(&x).unwrap();
    let s = h.stats();
    // 50 tiles of 200 of the 1000 tiles; the 10,000 uniform nonzeros add about 10 to
    // every tile (≈ 500 to the dense ones: share ≈ 10,500 / 20,000) and make no
    // other tile dense.
    assert_eq!(s.dense_tiles, 50, "{s:?}");
    assert!(s.dense_share() >= 0.5 && s.dense_share() <= 0.54, "{s:?}");
}

#[test]
fn shared_data_sets_round_trip_through_hls() {
    let Some(dir) = shared_data() else { return };
    let thresholds = [1, 8, 78, u32::MAX];
    for path in shared_files(&dir) {
        let (x, _) = tns::read(&path).unwrap();
        let built = HlsBuilder::build_many(&x, &thresholds).unwrap();
        for (h, t) in built.iter().zip(thresholds) {
            assert_eq!(h.threshold(), t);
            assert_exact(&x, h, &format!("{} at T = {t}", path.display()));
        }
        if x.order() == 3 {
            // T = 1 makes every tile dense, u32::MAX none.
            assert_eq!(built[0].stats().dense_nnz, x.nnz());
            assert_eq!(built[3].stats().dense_nnz, 0);
        }
    }
}

/// A tensor of the given dims with entries drawn from `coords` (may repeat) and values.
fn tensor_strategy() -> impl Strategy<Value = CooTensor> {
    (1usize..=5)
        .prop_flat_map(|order| {
            // Extents of 1, just around 16 and 32, and not multiples of 16.
            let dim = prop_oneof![Just(1usize), 2usize..40, Just(17usize), Just(33usize)];
            prop::collection::vec(dim, order)
        })
        .prop_flat_map(|dims| {
            let entry = (
                dims.iter().map(|&d| 0..d as u32).collect::<Vec<_>>(),
                prop_oneof![-1e3f64..1e3, (1u32..6).prop_map(f64::from)],
            );
            (Just(dims), prop::collection::vec(entry, 1..300))
        })
        .prop_map(|(dims, entries)| CooTensor::from_entries(dims, entries).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_tensors_round_trip_through_hls(
        x in tensor_strategy(),
        t in prop_oneof![Just(1u32), Just(2), Just(5), Just(4096), Just(u32::MAX)],
    ) {
        let mut unique = x.clone();
        let merged = unique.sum_duplicates();
        let h = HlsBuilder::new(t).build(&x).unwrap();
        prop_assert_eq!(h.stats().duplicates_summed, merged);
        assert_exact(&unique, &h, &format!("dims {:?}, T = {t}", x.dims()));
        if x.order() != 3 {
            prop_assert!(h.dense().is_none());
        }
        if t == 1 && x.order() == 3 {
            prop_assert_eq!(h.stats().sparse_nnz, 0);
        }
    }

    #[test]
    fn written_text_round_trips_through_hls(x in tensor_strategy()) {
        let mut text = Vec::new();
        tns::write_to(&mut text, &x).unwrap();
        let (y, report) = tns::parse(&text, std::path::Path::new("prop.tns")).unwrap();
        let mut unique = x.clone();
        let merged = unique.sum_duplicates();
        prop_assert_eq!(report.duplicates_summed, merged);
        // Dims come back as the largest index; compare coordinates and values.
        for m in 0..x.order() {
            prop_assert_eq!(y.indices(m), unique.indices(m));
        }
        prop_assert_eq!(y.values(), unique.values());
        let h = HlsBuilder::new(2).build(&y).unwrap();
        assert_exact(&y, &h, "from text");
    }
}

/// An extent whose indices need exactly `w` bits.
fn extent_of_width(w: u32) -> usize {
    if w == 0 { 1 } else { (1usize << (w - 1)) + 1 }
}

#[test]
fn layout_round_trips_every_width() {
    for w in 0..=32u32 {
        for extent in [extent_of_width(w), 1usize << w] {
            let l = KeyLayout::new(&[extent, 3, extent]).unwrap();
            assert_eq!(l.widths(), &[w, 2, w]);
            assert_eq!(l.shifts(), &[w + 2, w, 0]);
            assert_eq!(l.total_bits(), 2 * w + 2);
            let top = (extent - 1) as u32;
            for c in [
                [0, 0, 0],
                [top, 2, top],
                [top / 2, 1, top / 3],
                [top.min(1), 0, top],
            ] {
                let key = l.encode(&c);
                assert!(key < 1u128 << l.total_bits().max(1));
                let mut back = [0u32; 3];
                l.decode_all(key, &mut back);
                assert_eq!(back, c, "width {w}, extent {extent}");
                if l.total_bits() <= 64 {
                    assert_eq!(l.decode64(key as u64, 2), c[2]);
                }
            }
        }
    }
    // Three modes of 32 bits: the widest key supported.
    let l = KeyLayout::new(&[1 << 32; 3]).unwrap();
    assert_eq!(l.total_bits(), 96);
    let c = [u32::MAX, 12345, u32::MAX - 1];
    let mut back = [0; 3];
    l.decode_all(l.encode(&c), &mut back);
    assert_eq!(back, c);
}

#[test]
fn keys_wider_than_64_bits_split_into_blocks() {
    use rand::{Rng, SeedableRng};
    for dims in [
        vec![1usize << 30, (1 << 30) + 7, 1 << 10],
        vec![1 << 32, 3, (1 << 31) - 5],
        vec![100_003, 77, 1 << 32, 5, 1000],
    ] {
        assert!(KeyLayout::new(&dims).unwrap().total_bits() > 64, "{dims:?}");
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(dims.len() as u64);
        let entries: Vec<(Vec<u32>, f64)> = (0..500)
            .map(|k| {
                let c = dims
                    .iter()
                    .map(|&d| rng.random_range(0..d) as u32)
                    .collect();
                // Some entries share upper bits so blocks hold several keys.
                let c = if k % 3 == 0 { vec![0; dims.len()] } else { c };
                (c, rng.random_range(0.5..5.0))
            })
            .collect();
        let mut x = CooTensor::from_entries(dims.clone(), entries).unwrap();
        x.sum_duplicates();
        let h = HlsBuilder::new(1).build(&x).unwrap();
        assert!(h.dense().is_none(), "no tiles when tile keys do not fit");
        let sp = h.sparse();
        // The sparse part's layout: the shortest mode most significant.
        let layout = sp.layout();
        assert_eq!(layout, &KeyLayout::by_extent(&dims).unwrap());
        let mut keyed: Vec<(u128, usize)> = (0..x.nnz())
            .map(|k| (layout.encode(&x.coords(k)), k))
            .collect();
        keyed.sort_unstable();
        let prefixes: BTreeSet<u64> = keyed
            .iter()
            .map(|&(key, _)| (key >> LOW_KEY_BITS) as u64)
            .collect();
        assert_eq!(sp.block_prefix().len(), prefixes.len());
        assert!(sp.block_prefix().len() > 1);
        assert_eq!(
            sp.block_prefix(),
            prefixes.iter().copied().collect::<Vec<_>>()
        );
        assert_eq!(*sp.block_offsets().last().unwrap() as usize, x.nnz());
        for b in 0..sp.block_prefix().len() {
            let (s, e) = (
                sp.block_offsets()[b] as usize,
                sp.block_offsets()[b + 1] as usize,
            );
            assert!(s < e, "blocks are not empty");
            // Entries are in key order: entry p is the nonzero with the p-th key.
            for (p, &(key, k)) in keyed.iter().enumerate().take(e).skip(s) {
                assert_eq!(sp.block_of(p), b);
                assert_eq!(sp.full_key(b, p), key);
                let mut c = vec![0; dims.len()];
                layout.decode_all(sp.full_key(b, p), &mut c);
                assert_eq!(c, x.coords(k));
            }
        }
        assert_exact(&x, &h, &format!("{dims:?}"));
    }
}
