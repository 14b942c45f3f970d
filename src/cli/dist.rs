//! `sptmc cp` and `sptmc cp-apr` across MPI ranks: the same command under `mpirun` runs
//! distributed when
//! the binary was built with `--features mpi` (the launch is detected from `mpirun`'s
//! variables, [`sptmc::environment::mpi_launch`]). Each rank reads its share of the
//! file, holds its block on its own engine (the CPU with its share of the node's
//! cores, or the GPU of its local rank with `--backend cuda`), and rank 0 alone
//! writes `--out` and prints (`--json`: the usual summary plus a `distributed` object
//! with one entry per rank).

use sptmc::{Error, Result};

/// How a run under mpirun splits the work (`--grain`).
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum GrainArg {
    /// A grid of ranks over the modes; within a slab, the factor rows each rank's
    /// block uses exchanged.
    Medium,
    /// The same grid, every row of the slabs exchanged (for comparison).
    MediumSlabs,
    /// Every rank over whole modes; whole factors exchanged (for comparison).
    Coarse,
}

/// Whether this `sptmc cp` runs across ranks. An error for a run that cannot be what
/// was asked: `--grain` outside `mpirun`, or several ranks of a build without MPI
/// (each would fit the whole tensor and write the same files).
pub fn wanted(grain_given: bool) -> Result<bool> {
    let launch = sptmc::environment::mpi_launch();
    let with_mpi = cfg!(feature = "mpi");
    match launch {
        Some(_) if with_mpi => Ok(true),
        Some(l) if l.size > 1 => Err(Error::Unsupported(format!(
            "started by mpirun as one of {} ranks, but this sptmc was built without MPI: build it with `cargo build --release --features mpi`",
            l.size
        ))),
        _ if grain_given => Err(Error::InvalidOption(
            "--grain applies to runs under mpirun of a build with --features mpi".into(),
        )),
        _ => Ok(false),
    }
}

/// Never called: [`wanted`] is false without the feature.
#[cfg(not(feature = "mpi"))]
pub fn cp(_: super::args::CpArgs) -> Result<std::process::ExitCode> {
    unreachable!("wanted() is false without the mpi feature")
}

/// Never called: [`wanted`] is false without the feature.
#[cfg(not(feature = "mpi"))]
pub fn cp_apr(_: super::args::CpAprArgs) -> Result<std::process::ExitCode> {
    unreachable!("wanted() is false without the mpi feature")
}

#[cfg(feature = "mpi")]
pub use with_mpi::{cp, cp_apr};

#[cfg(feature = "mpi")]
mod with_mpi {
    use super::super::args::{BackendArg, Common, CpAprArgs, CpArgs};
    use super::super::cp_apr::{print_summary as print_apr_summary, say_warnings, weights_file};
    use super::super::decomp::{print_summary, progress_line, read_init, say_written};
    use super::super::load::default_spec;
    use super::GrainArg;
    use serde_json::json;
    use sptmc::decomp::{CpAprIter, IterStats};
    use sptmc::dist::comm::{Channel, DistResult, Failure};
    use sptmc::dist::cp_als::{RankStats, peak_memory};
    use sptmc::dist::exchange::{Block, Exchange, distribute};
    use sptmc::dist::mpi::Mpi;
    use sptmc::dist::output::write_factors;
    use sptmc::dist::partition::{Partition, Scheme};
    use sptmc::dist::read::{Share, read_share};
    use sptmc::dist::volume;
    use sptmc::driver::{CpAprReport, CpReport, CpRequest};
    use sptmc::engine::{BackendChoice, BackendKind, Engine};
    use sptmc::hls::ValueReport;
    use sptmc::hls::values::{QuantReport, ValueChoice, ValueType};
    use sptmc::model_io::finish_model;
    use sptmc::tensor::generate::generate_part;
    use sptmc::tensor::tns::part::Entries;
    use sptmc::{Error, Matrix, Result};
    use std::ops::ControlFlow;
    use std::path::Path;
    use std::process::ExitCode;
    use std::time::Instant;

    /// CP-ALS across the ranks of this `mpirun`.
    pub fn cp(a: CpArgs) -> Result<ExitCode> {
        with_ranks(|ch| run(ch, &a))
    }

    /// CP-APR across the ranks of this `mpirun`.
    pub fn cp_apr(a: CpAprArgs) -> Result<ExitCode> {
        with_ranks(|ch| run_apr(ch, &a))
    }

    /// Runs `f` on every rank of this `mpirun`; the failing rank says why.
    fn with_ranks(f: impl FnOnce(&Channel) -> DistResult<()>) -> Result<ExitCode> {
        let mpi =
            Mpi::init().ok_or_else(|| Error::Unsupported("MPI was initialized twice".into()))?;
        let ch = Channel::new(Box::new(mpi.world()));
        let outcome = f(&ch);
        // Every rank reaches this point (failures are agreed). The failing rank says why
        // before any rank leaves: mpirun ends the whole job at the first non-zero exit,
        // which could otherwise come before that line was written.
        if let Err(Failure::Here(e)) = &outcome {
            // One write, so that mpirun's forwarding of the ranks' output (and its own
            // notice of the exit) cannot cut into the line.
            use std::io::Write;
            let line = format!("sptmc: error: {e}\n");
            let mut err = std::io::stderr();
            let _ = err.write_all(line.as_bytes());
            let _ = err.flush();
        }
        if outcome.is_err() {
            // Everyone waits here until the line above is written.
            ch.reduce_u64(&mut [0], sptmc::dist::comm::Reduce::Sum);
        }
        drop(ch);
        drop(mpi);
        match outcome {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(_) => Ok(ExitCode::from(1)),
        }
    }

    /// Says `line` on stderr from rank 0.
    fn say(ch: &Channel, line: &str) {
        if ch.rank() == 0 {
            eprintln!("sptmc: {line}");
        }
    }

    /// This rank's engine: its share of the node's cores, or its local rank's GPU.
    fn engine(ch: &Channel, common: &Common) -> Result<Engine> {
        let launch = sptmc::environment::mpi_launch().expect("run under mpirun");
        let mut opts = sptmc::environment::engine_options();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        opts.cpu.threads = Some(common.threads.unwrap_or((cores / launch.local_size).max(1)));
        opts.cpu.use_current_thread = true;
        let choice = match common.backend {
            BackendArg::Auto => BackendChoice::Auto,
            BackendArg::Cpu => BackendChoice::Cpu,
            BackendArg::Cuda => BackendChoice::Cuda,
        };
        // A node's ranks take its devices round robin by local rank.
        let devices = match choice {
            BackendChoice::Cpu => 0,
            _ => sptmc::engine::cuda::device_count(),
        };
        let mapped = sptmc::engine::cuda::device_for_local_rank(
            launch.local_rank,
            launch.local_size,
            devices,
        );
        if let Some((ordinal, _)) = mapped {
            opts.cuda.ordinal = ordinal;
        }
        let engine = Engine::choose_with(choice, &opts)?
            .with_profiles(super::super::profiles())
            .with_values(common.values);
        if let Some(n) = engine.notice() {
            say(ch, n);
        }
        if let (Some((_, true)), BackendKind::Cuda) = (mapped, engine.kind()) {
            say(
                ch,
                &format!(
                    "{} ranks per node share {devices} device(s), round robin by local rank",
                    launch.local_size
                ),
            );
        }
        say(
            ch,
            &format!(
                "{} ranks, rank 0 on {}",
                ch.size(),
                engine.backend().describe()
            ),
        );
        Ok(engine)
    }

    /// This rank's share of the built-in tensor (no file given): the nonzeros its part
    /// of the generator's draws gives (rank `k` of `P` keeps draws `k·n/P ..
    /// (k+1)·n/P`), repeats not yet summed. The exchange sends every nonzero to its
    /// block in rank order, so a block's repeats are summed in the order they were
    /// drawn: the tensor is the single process's, value for value, and no rank holds
    /// more than its part.
    fn builtin_share(ch: &Channel) -> Result<Share> {
        let spec = default_spec();
        let (p, me, n) = (ch.size(), ch.rank(), spec.nnz);
        let end = if me + 1 == p {
            usize::MAX
        } else {
            (me + 1) * n / p
        };
        let (indices, values) = generate_part(&spec, me * n / p..end)?;
        let mut e = Entries::new(spec.dims.len());
        e.max = indices
            .iter()
            .map(|ix| ix.iter().copied().max().unwrap_or(0))
            .collect();
        e.indices = indices;
        e.values = values;
        Ok(Share {
            entries: e,
            dims: spec.dims,
            total_entries: n as u64,
            total_lines: 0,
        })
    }

    /// Reads the tensor `file` (the built-in one when `None`) across the ranks and gives
    /// each its block of the partition by `scheme` (for a CP model of rank `cp_rank`,
    /// on the used rows of the modes where that pays); with the tensor's name.
    fn read_block(
        ch: &Channel,
        file: Option<&Path>,
        (scheme, exchange): (Scheme, Exchange),
        cp_rank: Option<usize>,
    ) -> DistResult<(Block, String)> {
        let (share, name, path) = match file {
            None => (
                ch.agree(builtin_share(ch))?,
                "built-in".to_string(),
                Path::new("built-in"),
            ),
            Some(p) => {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string());
                (read_share(ch, p)?, name, p)
            }
        };
        let start = Instant::now();
        let mut block = distribute(ch, share, scheme, path, cp_rank)?;
        block.exchange = exchange;
        say(
            ch,
            &format!(
                "{name}: {:?}, {} nonzeros over {} ranks ({:?} grid {:?}), read and distributed in {:.3}s",
                block.tensor_dims(),
                block.nnz,
                ch.size(),
                scheme,
                block.partition.grid().shape,
                start.elapsed().as_secs_f64()
            ),
        );
        Ok((block, name))
    }

    fn run(ch: &Channel, a: &CpArgs) -> DistResult<()> {
        let mut request = CpRequest {
            rank: a.rank,
            iters: a.iters,
            tol: a.model.tol,
            seed: a.model.seed,
            init: None,
        };
        ch.agree(request.check())?;
        let dir_ok = match (&a.model.out, ch.rank()) {
            (Some(dir), 0) => super::super::output::check_dir(dir),
            _ => Ok(()),
        };
        ch.agree(dir_ok)?;
        let engine = ch.agree(engine(ch, &a.model.common))?;
        let grain = scheme(a.grain);
        let scheme = grain.0;
        let (mut block, name) = read_block(ch, a.file.as_deref(), grain, Some(a.rank))?;
        if let Some(rows) = &block.rows {
            say(ch, &format!("note: {}", rows.note("CP-ALS")));
        }
        request.init = ch.agree(read_init(a.model.init.as_deref(), block.dims.len()))?;
        let job = ch.agree(request.validate_shape(block.tensor_dims(), block.nnz))?;
        let quiet = a.model.common.json || ch.rank() != 0;
        let mut control = |s: &IterStats| {
            if !quiet {
                eprintln!("{}", progress_line(s));
            }
            ControlFlow::Continue(())
        };
        let start = Instant::now();
        let out = sptmc::dist::cp_als::cp_als(ch, &engine, &mut block, &job.options, &mut control)?;
        let seconds = start.elapsed().as_secs_f64();
        let staged = match &a.model.out {
            Some(dir) => ch.agree(write_factors(ch, dir, &out.factors(&block)))?,
            None => None,
        };
        // Every rank's peak memory, the writing of the factors included.
        let ranks = gather_stats(ch, &out.stats);
        let report = CpReport {
            model: out.model,
            seconds,
            backend: engine.backend().describe(),
            values: values_of_ranks(&ranks),
        };
        let mut summary = report.summary(&name, block.tensor_dims(), block.nnz as usize);
        let (p, n, r) = (&block.partition, block.dims.len(), a.rank);
        let slabs = |p: &Partition, k: usize| volume::rows_bytes(p, k, r).iter().sum::<u64>();
        let scalars = volume::scalars_bytes(p.ranks(), n, r);
        let rough = volume::rough_bytes(&block.dims, p.ranks(), r)
            .iter()
            .sum::<u64>();
        summary["distributed"] = distributed_json(&block, scheme, &ranks, (&slabs, scalars), rough);
        let weights = &report.model.weights;
        let written = match staged {
            Some(staged) => Matrix::new(weights.len(), 1, weights.clone())
                .and_then(|w| {
                    let files = [("weights.txt", "CP weights (lambda)".to_string(), w)];
                    finish_model(staged, &files, &summary)
                })
                .map(|()| true),
            None => Ok(false),
        };
        if ch.agree(written)?
            && let Some(dir) = &a.model.out
        {
            say_written(&["weights.txt"], dir);
        }
        if ch.rank() == 0 {
            let what = format!("CP-ALS rank {} on {} ranks", a.rank, ch.size());
            print_summary(a.model.common.json, &summary, &what);
        }
        Ok(())
    }

    /// The partition scheme and exchange of `--grain`.
    fn scheme(grain: Option<GrainArg>) -> (Scheme, Exchange) {
        match grain {
            Some(GrainArg::Coarse) => (Scheme::Coarse, Exchange::Slabs),
            Some(GrainArg::MediumSlabs) => (Scheme::Medium, Exchange::Slabs),
            Some(GrainArg::Medium) | None => (Scheme::Medium, Exchange::UsedRows),
        }
    }

    /// Every rank's figures, on every rank, with its peak memory as of now.
    fn gather_stats(ch: &Channel, s: &RankStats) -> Vec<RankStats> {
        let nnz = ch.gather_u64(s.nnz);
        let peak = ch.gather_u64(peak_memory());
        let planned = ch.gather_u64(s.planned_bytes);
        let compute = ch.gather_u64(s.compute_seconds.to_bits());
        let comm = ch.gather_u64(s.comm_seconds.to_bits());
        let bytes = ch.gather_u64(s.bytes_per_iter);
        let model = ch.gather_u64(s.model_rows_bytes);
        let values = gather_values(ch, s.values.as_ref());
        (0..ch.size())
            .map(|r| RankStats {
                rank: r,
                nnz: nnz[r],
                peak_bytes: peak[r],
                planned_bytes: planned[r],
                compute_seconds: f64::from_bits(compute[r]),
                comm_seconds: f64::from_bits(comm[r]),
                bytes_per_iter: bytes[r],
                model_rows_bytes: model[r],
                values: values[r].clone(),
            })
            .collect()
    }

    /// Every rank's report of how its block's values are stored, from each rank's
    /// `mine`: its type, choice, counts and bytes travel as integers, the words are
    /// made again from them.
    fn gather_values(ch: &Channel, mine: Option<&ValueReport>) -> Vec<Option<ValueReport>> {
        let code = mine.map_or(0, |v| {
            let ty = match v.value_type {
                ValueType::F16 => 0,
                ValueType::F32 => 1,
            };
            let choice = match v.choice {
                ValueChoice::Auto => 0,
                ValueChoice::F16 => 1,
                ValueChoice::F32 => 2,
            };
            1 + ty + 2 * choice
        });
        let field = |f: &dyn Fn(&ValueReport) -> u64| ch.gather_u64(mine.map_or(0, f));
        let codes = ch.gather_u64(code);
        let (f16, f32) = (
            field(&|v| v.f16_bytes as u64),
            field(&|v| v.f32_bytes as u64),
        );
        // What the values lost, a field at a time (the f32 and f64 ones as their bits).
        let q = |f: fn(&QuantReport) -> u64| field(&move |v| f(&v.precision));
        let scale = q(|p| u64::from(p.scale.to_bits()));
        let (inexact, worst) = (q(|p| p.f16_inexact as u64), q(|p| p.max_rel_err.to_bits()));
        let (subnormal, zero) = (q(|p| p.subnormal as u64), q(|p| p.flushed_to_zero as u64));
        let (tiny, flushed) = (q(|p| p.kernel_tiny as u64), q(|p| p.kernel_flushed as u64));
        let integers = q(|p| p.integers_inexact as u64);
        (0..ch.size())
            .map(|r| {
                let c = codes[r].checked_sub(1)?;
                let ty = [ValueType::F16, ValueType::F32][(c % 2) as usize];
                let choice =
                    [ValueChoice::Auto, ValueChoice::F16, ValueChoice::F32][(c / 2) as usize];
                let quant = QuantReport {
                    scale: f32::from_bits(scale[r] as u32),
                    f16_inexact: inexact[r] as usize,
                    max_rel_err: f64::from_bits(worst[r]),
                    subnormal: subnormal[r] as usize,
                    flushed_to_zero: zero[r] as usize,
                    kernel_tiny: tiny[r] as usize,
                    kernel_flushed: flushed[r] as usize,
                    integers_inexact: integers[r] as usize,
                };
                Some(ValueReport::new(
                    (ty, choice),
                    quant,
                    (f16[r] as usize, f32[r] as usize),
                ))
            })
            .collect()
    }

    /// The run's report of its values: the ranks' together where they stored them
    /// alike (each rank's is in `distributed.per_rank`).
    fn values_of_ranks(ranks: &[RankStats]) -> Option<ValueReport> {
        let reports: Vec<ValueReport> = ranks.iter().filter_map(|s| s.values.clone()).collect();
        ValueReport::of_parts(&reports)
    }

    /// The bytes of factor rows a rank of a partition sends per iteration when every
    /// row of its slabs travels (`volume`'s models).
    type SlabModel<'a> = dyn Fn(&Partition, usize) -> u64 + 'a;

    /// The `distributed` object of `--json`: the partition, every rank's figures, and
    /// the bytes per iteration against the models: the rows the run's routes move
    /// (each rank's `model_rows_bytes`), every row of the slabs (`slabs` of a partition
    /// and a rank: this grid's and the coarse-grained variant's whole factors), each
    /// with the small all-reduces' `scalars`; the rough `I·R/P^(1/N)` figure.
    fn distributed_json(
        block: &Block,
        scheme: Scheme,
        ranks: &[RankStats],
        (slabs, scalars): (&SlabModel, u64),
        rough: u64,
    ) -> serde_json::Value {
        let p = &block.partition;
        let n = block.dims.len();
        let coarse = Partition::coarse(p.ranks(), &block.dims);
        let per_rank: Vec<serde_json::Value> = ranks
            .iter()
            .map(|s| {
                json!({
                    "rank": s.rank, "nnz": s.nnz, "peak_bytes": s.peak_bytes,
                    "planned_bytes": s.planned_bytes,
                    "compute_seconds": s.compute_seconds, "comm_seconds": s.comm_seconds,
                    "bytes_per_iter": s.bytes_per_iter,
                    "model_bytes_per_iter": s.model_rows_bytes + scalars,
                    "slab_model_bytes_per_iter": slabs(p, s.rank) + scalars,
                    "coarse_model_bytes_per_iter": slabs(&coarse, s.rank) + scalars,
                    "values": s.values,
                })
            })
            .collect();
        // The run's rows of each mode: the used ones where it holds only those.
        let rows_held: Vec<usize> = block.dims.clone();
        json!({
            "ranks": p.ranks(),
            "scheme": scheme,
            "exchange": match scheme {
                Scheme::Coarse => None,
                Scheme::Medium => Some(block.exchange),
            },
            "rows_held": rows_held,
            "grid": p.grid().shape,
            "bounds": (0..n).map(|m| p.bounds(m).to_vec()).collect::<Vec<_>>(),
            "rough_bytes_per_iter": rough,
            "per_rank": per_rank,
        })
    }

    fn run_apr(ch: &Channel, a: &CpAprArgs) -> DistResult<()> {
        let mut request = super::super::cp_apr::request(a);
        ch.agree(request.check())?;
        let dir_ok = match (&a.out, ch.rank()) {
            (Some(dir), 0) => super::super::output::check_dir(dir),
            _ => Ok(()),
        };
        ch.agree(dir_ok)?;
        let engine = ch.agree(engine(ch, &a.common))?;
        let grain = scheme(a.grain);
        let scheme = grain.0;
        let (mut block, name) = read_block(ch, a.file.as_deref(), grain, Some(a.rank))?;
        if let Some(rows) = &block.rows {
            say(ch, &format!("note: {}", rows.note("CP-APR")));
        }
        request.init = ch.agree(read_init(a.init.as_deref(), block.dims.len()))?;
        let mut job = ch.agree(request.validate_shape(block.tensor_dims(), block.nnz))?;
        let quiet = a.common.json || ch.rank() != 0;
        let mut progress = |s: &CpAprIter| {
            if !quiet {
                eprintln!("{}", super::super::cp_apr::progress_line(s));
            }
        };
        let start = Instant::now();
        let mut out =
            sptmc::dist::cp_apr::cp_apr(ch, &engine, &mut block, &job.options, &mut progress)?;
        if out.is_none() {
            // A mode held on its used rows did not update in the first iteration: the
            // single process's run on every row, as it does then.
            say(
                ch,
                "note: a mode met the tolerance at the start; CP-APR runs on every row",
            );
            block = read_block(ch, a.file.as_deref(), grain, None)?.0;
            out =
                sptmc::dist::cp_apr::cp_apr(ch, &engine, &mut block, &job.options, &mut progress)?;
        }
        let out = ch.agree(
            out.ok_or_else(|| Error::Numerical("CP-APR on every row gave way to itself".into())),
        )?;
        job.scale = out.scale;
        let seconds = start.elapsed().as_secs_f64();
        let staged = match &a.out {
            Some(dir) => ch.agree(write_factors(ch, dir, &out.factors(&block)))?,
            None => None,
        };
        // Every rank's peak memory, the writing of the factors included.
        let ranks = gather_stats(ch, &out.stats);
        // The bytes models read the mean Φ evaluations per mode and iteration.
        let iters = out.model.iters.len().max(1) as f64;
        let evals: Vec<f64> = out.evaluations.iter().map(|&e| e as f64 / iters).collect();
        let report = CpAprReport {
            model: out.model,
            seconds,
            backend: engine.backend().describe(),
            values: values_of_ranks(&ranks),
        };
        let mut summary = report.summary(&job, &name, block.tensor_dims(), block.nnz as usize);
        let (n, r) = (block.dims.len(), a.rank);
        let slabs = |p: &Partition, k: usize| volume::apr_rows_bytes(p, k, r, &evals).iter().sum();
        let ranks_n = block.partition.ranks();
        let scalars = volume::apr_scalars_bytes(ranks_n, n, r, evals.iter().sum());
        let rough = volume::apr_rough_bytes(&block.dims, ranks_n, r, &evals);
        summary["distributed"] = distributed_json(&block, scheme, &ranks, (&slabs, scalars), rough);
        let model = &report.model;
        if ch.rank() == 0 {
            say_warnings(model);
        }
        let written = match staged {
            Some(staged) => weights_file(model)
                .and_then(|f| finish_model(staged, &[f], &summary).map(|()| true)),
            None => Ok(false),
        };
        if ch.agree(written)?
            && let Some(dir) = &a.out
        {
            say_written(&["weights.txt"], dir);
        }
        if ch.rank() == 0 {
            let what = format!("CP-APR rank {} on {} ranks", a.rank, ch.size());
            print_apr_summary(a.common.json, model, &summary, seconds, &what);
        }
        Ok(())
    }
}
