//! `sptmc mttkrp`, `sptmc ttmc` and `sptmc info`.

use super::args::{ConvertArgs, InfoArgs, KernelArgs};
use super::load::{load, report_precision};
use super::{engine, print_json};
use serde_json::json;
use sptmc::accuracy::compare;
use sptmc::engine::cpu::{CacheSizes, add_streamed_to_plan};
use sptmc::engine::{Backend, Workload};
use sptmc::hls::HlsBuilder;
use sptmc::memplan::MemoryPlan;
use sptmc::model_io::write_matrix;
use sptmc::tools::measure::measure;
use sptmc::{Error, Matrix, Op, Result, reference};
use std::process::ExitCode;

/// One kernel, timed, optionally checked.
pub fn kernel(op: Op, a: KernelArgs) -> Result<ExitCode> {
    if a.reps == 0 {
        return Err(Error::InvalidOption("--reps must be at least 1".into()));
    }
    if let Some(out) = &a.out {
        super::output::check_file(out, "--out")?;
        super::output::check_not_input(out, "--out", a.file.as_deref())?;
    }
    let loaded = load(a.file.as_deref(), !a.no_cache)?;
    let x = &loaded.tensor;
    x.check_mode(a.mode)?;
    if x.order() < 2 {
        return Err(Error::InvalidTensor(format!(
            "{op} needs a tensor of order ≥ 2: {} has one mode, so no factor multiplies it",
            loaded.name
        )));
    }
    let ranks: Vec<usize> = match &a.ranks {
        // One rank for every mode, as `tucker --ranks R` takes it.
        Some(r) if r.len() == 1 => vec![r[0]; x.order()],
        Some(r) if r.len() != x.order() => {
            return Err(Error::InvalidRank(format!(
                "--ranks has {} entries, the tensor has {} modes (one entry: that rank for every mode)",
                r.len(),
                x.order()
            )));
        }
        Some(r) => r.clone(),
        None => vec![a.rank; x.order()],
    };
    if let Some(m) = (0..x.order()).find(|&m| m != a.mode && ranks[m] == 0) {
        return Err(Error::InvalidRank(format!("rank of mode {m} is 0")));
    }
    if op != Op::Ttmc && a.ranks.is_some() {
        return Err(Error::InvalidOption(format!(
            "{op} uses one rank for every factor: give --rank, not --ranks"
        )));
    }
    let engine = engine(&a.common)?;
    eprintln!("sptmc: {}", loaded.note);
    let rank = (0..x.order())
        .filter(|&m| m != a.mode)
        .map(|m| ranks[m])
        .max()
        .unwrap_or(1);
    let values = engine.values().resolve_values(x.values());
    let threshold = match a.threshold {
        Some(t) => t,
        None => {
            engine
                .threshold_for(Workload { op, rank }, values)
                .threshold
        }
    };
    // Everything this run allocates, checked before any of it.
    let mut plan = MemoryPlan::kernel(op, x.dims(), a.mode, &ranks, a.check, a.out.is_some());
    plan.add_prepare(x.nnz(), x.order(), 1, threshold, op, values);
    plan.add_tensor(x.nnz(), x.order());
    let workers = engine.workers();
    if op == sptmc::Op::Ttmc {
        plan.add_row_groups(x.dims(), x.nnz(), workers);
    }
    if op == sptmc::Op::Mttkrp {
        plan.add_row_groups(x.dims(), x.nnz(), workers);
        if let Backend::Cpu(_) = engine.backend() {
            let cache = CacheSizes::of_this_machine();
            add_streamed_to_plan(&mut plan, x.dims(), x.nnz(), rank, &[a.mode], cache);
        }
    }
    plan.check()?;
    let prepared = match a.threshold {
        Some(t) => engine.prepare_with_thresholds(x, &[(op, t)])?,
        None => engine.prepare(x, &[Workload { op, rank }])?,
    };
    super::say_thresholds(&prepared);
    let built = prepared.hls(op)?.stats();
    report_precision(built);
    eprintln!("sptmc: values {} ({})", built.values, built.value_note());
    let factors = Matrix::random_factors(x.dims(), &ranks, a.seed);
    // The engine refuses a result holding inf or NaN: none is printed or written.
    let mut out = Matrix::zeros(0, 0);
    let times = measure(a.reps, || {
        let stats = engine.run_into(op, &prepared, a.mode, &factors, &mut out)?;
        engine.backend().synchronize()?;
        Ok(stats.kernel_seconds)
    })?;
    let median = times.median;
    let accuracy = if a.check {
        let want = reference::apply(op, x, a.mode, &factors)?;
        Some(compare(&want, &out)?)
    } else {
        None
    };
    if let Some(path) = &a.out {
        write_matrix(path, &format!("{op} of mode {}", a.mode), &out.to_f64())?;
    }
    let stats = prepared.hls(op)?.stats();
    let passed = accuracy.is_none_or(|acc| acc.within_contract());
    if a.common.json {
        print_json(&json!({
            "op": op.name(), "tensor": loaded.name, "dims": x.dims(), "nnz": x.nnz(),
            "mode": a.mode, "ranks": ranks, "threshold": stats.threshold,
            "dense_share": stats.dense_share(), "backend": engine.backend().describe(),
            "values": stats.value_report(),
            "seconds_median": median, "seconds_min": times.min,
            "nnz_per_second": x.nnz() as f64 / median, "accuracy": accuracy,
        }));
    } else {
        println!(
            "{op} mode {} ranks {:?}: {:.6}s median of {} ({:.1} M nnz/s), output {}x{}, threshold {} ({:.1}% of nnz in dense tiles)",
            a.mode,
            ranks,
            median,
            a.reps,
            x.nnz() as f64 / median / 1e6,
            out.rows(),
            out.cols(),
            stats.threshold,
            100.0 * stats.dense_share()
        );
        if let Some(acc) = accuracy {
            println!(
                "check vs FP64 reference: SMAPE {:.5}% (contract ≤ {}%), max rel err {:.3e}, rel Frobenius {:.3e}: {}",
                acc.smape_percent,
                sptmc::accuracy::SMAPE_TARGET_PERCENT,
                acc.max_rel_err,
                acc.rel_frobenius,
                if passed { "PASS" } else { "FAIL" }
            );
        }
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// Tensor statistics and the HLS byte comparison.
pub fn info(a: InfoArgs) -> Result<ExitCode> {
    let loaded = load(a.file.as_deref(), !a.no_cache)?;
    let x = &loaded.tensor;
    let mut plan = MemoryPlan::new(
        format!("the HLS form of {} nonzeros", x.nnz()),
        "the tensor is too large for this machine",
    );
    let values = a.values.resolve_values(x.values());
    plan.add_prepare(
        x.nnz(),
        x.order(),
        1,
        a.threshold,
        sptmc::Op::Mttkrp,
        values,
    );
    plan.check()?;
    let hls = HlsBuilder::new(a.threshold)
        .with_values(a.values)
        .build(x)?;
    let s = hls.stats();
    report_precision(s);
    if a.json {
        print_json(&json!({
            "tensor": loaded.name, "dims": x.dims(), "order": x.order(), "nnz": x.nnz(),
            "density": x.density(), "norm": x.norm_sq().sqrt(), "hls": s,
            "duplicates_summed": loaded.duplicates_summed,
            "dense_share": s.dense_share(), "hls_bytes": s.hls_bytes(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("sptmc: {}", loaded.note);
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!("tensor      {}", loaded.name);
    println!("dims        {:?} (order {})", x.dims(), x.order());
    println!("nnz         {}", x.nnz());
    println!("density     {:.3e}", x.density());
    println!("norm        {:.6e}", x.norm_sq().sqrt());
    println!("HLS at threshold {}:", s.threshold);
    if x.order() == 3 {
        println!("  tiles     {} non-empty, {} dense", s.tiles, s.dense_tiles);
    } else {
        println!("  tiles     none (dense tiles are for 3rd-order tensors; all nonzeros sparse)");
    }
    println!(
        "  nnz       {} dense ({:.2}%), {} sparse in {} blocks",
        s.dense_nnz,
        100.0 * s.dense_share(),
        s.sparse_nnz,
        s.sparse_blocks
    );
    println!("  values    {} ({})", s.values, s.value_note());
    println!(
        "  {:<9} scale {}, worst relative error {:.2e}, {} subnormal, {} lost",
        s.values, s.quant.scale, s.quant.max_rel_err, s.quant.subnormal, s.quant.flushed_to_zero
    );
    println!("bytes (MiB)                  bytes/nnz  vs COO");
    let row = |name: &str, b: usize| {
        println!(
            "  {name:<26} {:>9.2}  {:>9.2}  {:>5.1}%",
            mib(b),
            b as f64 / x.nnz() as f64,
            100.0 * b as f64 / s.coo_bytes as f64
        )
    };
    row("HLS (dense + sparse)", s.hls_bytes());
    row("  dense tiles", s.dense_bytes);
    row("  sparse part", s.sparse_bytes);
    row("all sparse (HLS-S only)", s.all_sparse_bytes);
    if x.order() == 3 {
        row("all tiles dense", s.all_dense_bytes);
    }
    row("HLS with fp16 values", s.f16_bytes);
    row("HLS with f32 values", s.f32_bytes);
    row("COO (u32 indices, f32)", s.coo_bytes);
    Ok(ExitCode::SUCCESS)
}

/// `sptmc convert`: the tensor in another format, written whole or not at all.
pub fn convert(a: ConvertArgs) -> Result<ExitCode> {
    let name = a.out.to_string_lossy().to_ascii_lowercase();
    let binary = name.ends_with(".sptb");
    if !binary && !name.ends_with(".tns") && !name.ends_with(".tns.gz") {
        return Err(Error::InvalidOption(format!(
            "{}: the output's name must end in .sptb, .tns or .tns.gz",
            a.out.display()
        )));
    }
    if !a.force && std::fs::symlink_metadata(&a.out).is_ok() {
        return Err(Error::InvalidOption(format!(
            "{} exists; give --force to replace it",
            a.out.display()
        )));
    }
    super::output::check_file(&a.out, "OUT")?;
    let loaded = load(Some(&a.file), false)?;
    eprintln!("sptmc: {}", loaded.note);
    if binary {
        sptmc::tensor::binary::write(&a.out, &loaded.tensor)?;
    } else {
        // Under a temporary name first, so OUT is whole or absent.
        let tmp = sptmc::tensor::binary::temporary_name(&a.out);
        let done = sptmc::tensor::tns::write_declaring(&tmp, &loaded.tensor).and_then(|h| {
            std::fs::rename(&tmp, &a.out).map_err(|e| Error::io(&a.out, e))?;
            Ok(h)
        });
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        if done? {
            eprintln!(
                "sptmc: note: the modes' lengths {:?} exceed their largest indices, so {} starts with a header declaring them (the order, then the lengths); SPLATT and numpy.loadtxt do not read headers",
                loaded.tensor.dims(),
                a.out.display()
            );
        }
    }
    eprintln!(
        "sptmc: wrote {} ({} nonzeros)",
        a.out.display(),
        loaded.tensor.nnz()
    );
    Ok(ExitCode::SUCCESS)
}
