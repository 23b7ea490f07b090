//! The report of a comparison: `report.json`, `report.md` (one table) and
//! two PNG plots (skew CDF per controller, Jobs per second over time).

use crate::cluster::ClientLimits;
use crate::compare::{Run, Scenario};
use crate::scale::ScaleRun;
use crate::scaleout::{ApiServerFigures, ReplicaFigures, ScaleOutRun};
use crate::slots::{SlotSummary, percentile};
use anyhow::Context;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

pub const MIB: f64 = 1024.0 * 1024.0;

/// The CPU seconds of the controller itself: shardcron's replicas, or
/// kube-controller-manager when it runs the CronJob controller.
pub fn controller_cpu(run: &Run) -> f64 {
    if run.variant == "upstream" {
        kcm(run).map(|p| p.cpu_seconds).unwrap_or(0.0)
    } else {
        shardcron_replicas(run).map(|p| p.cpu_seconds).sum()
    }
}

fn shardcron_replicas(run: &Run) -> impl Iterator<Item = &crate::observe::ProcessFigures> {
    run.observation
        .processes
        .iter()
        .filter(|p| p.name.starts_with("shardcron"))
}

fn kcm(run: &Run) -> Option<&crate::observe::ProcessFigures> {
    run.observation
        .processes
        .iter()
        .find(|p| p.name == "kube-controller-manager")
}

/// Peak RSS of the controller: the largest replica, or KCM.
fn controller_peak_rss(run: &Run) -> u64 {
    if run.variant == "upstream" {
        kcm(run).map(|p| p.peak_rss_bytes).unwrap_or(0)
    } else {
        shardcron_replicas(run)
            .map(|p| p.peak_rss_bytes)
            .max()
            .unwrap_or(0)
    }
}

fn api_load(run: &Run) -> crate::apimetrics::ClientLoad {
    run.observation
        .api
        .get(crate::apimetrics::schema_of(run.variant == "upstream"))
        .copied()
        .unwrap_or_default()
}

/// Milliseconds as seconds with two decimals, or `-`.
pub fn ms(v: Option<i64>) -> String {
    v.map(|v| format!("{:.2}", v as f64 / 1000.0))
        .unwrap_or_else(|| "-".into())
}

fn skew_cells(s: &SlotSummary) -> String {
    let k = &s.skews_ms;
    format!(
        "{} | {} | {}",
        ms(percentile(k, 50.0)),
        ms(percentile(k, 99.0)),
        ms(k.last().copied())
    )
}

/// A one-line summary for progress output.
pub fn one_line(run: &Run) -> String {
    let s = &run.observation.slots;
    format!(
        "{} slots, {} missed, {} duplicates, skew p50 {} s p99 {} s max {} s, CPU {:.1} s",
        s.expected,
        s.missed,
        s.duplicates,
        ms(percentile(&s.skews_ms, 50.0)),
        ms(percentile(&s.skews_ms, 99.0)),
        ms(s.skews_ms.last().copied()),
        controller_cpu(run)
    )
}

/// The Markdown table of a comparison.
pub fn markdown(scenario: &Scenario, runs: &[Run]) -> String {
    let mut out = heading(scenario, runs.first().map(|r| r.limits));
    let _ = writeln!(
        out,
        "| controller | slots | missed | duplicates | skew p50 s | skew p99 s | skew max s | small tenants p99 s | ready s | controller CPU s | CPU ms/slot | KCM CPU s | peak RSS MiB | API requests | API exec s | APF wait s | API 429s | Lease lapses |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for run in runs {
        let o = &run.observation;
        let cpu = controller_cpu(run);
        let api = api_load(run);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {} |",
            run.variant,
            o.slots.expected,
            o.slots.missed,
            o.slots.duplicates,
            skew_cells(&o.slots),
            o.small_tenants
                .as_ref()
                .map(|s| ms(percentile(&s.skews_ms, 99.0)))
                .unwrap_or_else(|| "-".into()),
            run.ready_seconds
                .map(|s| format!("{s:.1}"))
                .unwrap_or_else(|| "-".into()),
            cpu,
            1000.0 * cpu / o.slots.answered.max(1) as f64,
            kcm(run).map(|p| p.cpu_seconds).unwrap_or(0.0),
            controller_peak_rss(run) as f64 / MIB,
            api.requests,
            api.execution_seconds,
            api.wait_seconds,
            api.rejected,
            run.lease_lapses
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    if runs.iter().any(|r| r.observation.failover.is_some()) {
        out.push_str(&failover_table(runs));
    }
    if runs.iter().any(|r| r.observation.small_tenants.is_some()) {
        out.push_str(&quiet_tenants_table(runs));
    }
    if runs.iter().any(|r| r.handoff.is_some()) {
        out.push_str(&handoff_table(runs));
    }
    out.push_str(
        "\nSkew: the moment the Job first appeared in a watch minus its scheduled time. \
         CPU: from the first watched slot to the end of the tail (for a herd, 30 s \
         after its last Job appeared). Controller CPU is \
         kube-controller-manager as a whole for upstream (every controller it runs), \
         the sum of the replicas for shardcron; KCM CPU is shown for every run so the \
         difference can be read. API requests, execution time, time queued (APF wait) \
         and requests turned away with 429: kube-apiserver's APF counters for the \
         controller's FlowSchema. Lease lapses: the times a shardcron replica's \
         renew deadline passed unrenewed, summed over the replicas running at the \
         end (a killed one is not counted).\n",
    );
    out
}

/// `--join-during-herd`: how long the hand-off to the joining replica took.
fn handoff_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "\nA replica joined during the herd (the losing side's publication is the stop of its lost \
         keys' actors; the gaining side's wait, from a key's arrival to its start):\n\n\
         | controller | joined after s | joiner ready s | publication, slowest replica s | gained keys' wait, average s |\n\
         |---|---:|---:|---:|---:|\n",
    );
    let seconds = |s: Option<f64>| s.map_or_else(|| "-".into(), |s| format!("{s:.3}"));
    for run in runs {
        let Some(h) = &run.handoff else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {} | {} |",
            run.variant,
            h.joined_after_seconds,
            h.joiner_ready_seconds,
            seconds(h.publish_seconds_max),
            seconds(h.gained_wait_seconds_avg),
        );
    }
    out
}

/// S4: the killed controller's CronJobs and their first slot after the
/// kill, beside the others' same slot.
/// The other tenants beside the big or hostile one (S5, S8): their slots
/// alone, and how much each controller's resident memory grew over the
/// window (the largest replica's growth).
fn quiet_tenants_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "\n| controller | other tenants' slots | missed | duplicates | skew p50 s | skew p99 s | skew max s | RSS growth MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let Some(quiet) = &run.observation.small_tenants else {
            continue;
        };
        let growth = if run.variant == "upstream" {
            kcm(run).map(rss_growth).unwrap_or(0)
        } else {
            shardcron_replicas(run).map(rss_growth).max().unwrap_or(0)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1} |",
            run.variant,
            quiet.expected,
            quiet.missed,
            quiet.duplicates,
            skew_cells(quiet),
            growth as f64 / MIB,
        );
    }
    out
}

/// Resident memory gained over the window (0 for runs kept without the
/// start's figure).
fn rss_growth(process: &crate::observe::ProcessFigures) -> u64 {
    if process.rss_bytes_at_start == 0 {
        return 0;
    }
    process
        .rss_bytes_at_end
        .saturating_sub(process.rss_bytes_at_start)
}

fn failover_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "\nThe slot after the kill (a controller got SIGKILL 1 s before it):\n\n\
         | controller | CronJobs affected | share | affected p50 s | affected p99 s | affected max s | affected missed | affected duplicates | others p99 s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let Some(f) = &run.observation.failover else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {} of {} | {:.0}% | {} | {} | {} | {} | {} | {} |",
            run.variant,
            f.affected_cronjobs,
            f.cronjobs,
            100.0 * f.affected_cronjobs as f64 / f.cronjobs.max(1) as f64,
            ms(percentile(&f.affected.skews_ms, 50.0)),
            ms(percentile(&f.affected.skews_ms, 99.0)),
            ms(f.affected.skews_ms.last().copied()),
            f.affected.missed,
            f.affected.duplicates,
            ms(percentile(&f.others.skews_ms, 99.0)),
        );
    }
    out
}

fn heading(scenario: &Scenario, limits: Option<ClientLimits>) -> String {
    format!(
        "### {:?} ({:?}): {} CronJobs, {:?} mix{}\n\n",
        scenario.name,
        scenario.mode,
        scenario.count,
        scenario.mix,
        limits
            .map(|l| format!(", client QPS {}/burst {}", l.qps, l.burst))
            .unwrap_or_default()
    )
}

/// A scale run in one line, for progress output.
pub fn scale_line(run: &ScaleRun) -> String {
    format!(
        "{}: armed in {:.1} s, {:.0} B per CronJob, idle CPU {:.1} ms/s",
        run.variant,
        run.loaded.armed_seconds,
        run.rss_bytes_per_cronjob(),
        1000.0 * run.loaded.idle_cpu
    )
}

/// S3's table: memory per CronJob (and against upstream's), time until
/// armed, idle CPU, each on the empty cluster and loaded.
pub fn scale_markdown(scenario: &Scenario, runs: &[ScaleRun]) -> String {
    let mut out = heading(scenario, None);
    let upstream = runs
        .iter()
        .find(|r| r.variant == "upstream")
        .map(ScaleRun::rss_bytes_per_cronjob);
    out.push_str(
        "| controller | armed s (empty) | armed s | start-up API requests | RSS empty MiB | RSS loaded MiB | peak RSS MiB | bytes per CronJob | vs upstream | idle CPU ms/s (empty) | idle CPU ms/s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let per = run.rss_bytes_per_cronjob();
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.1} | {:.1} |",
            run.variant,
            run.empty.armed_seconds,
            run.loaded.armed_seconds,
            run.loaded.startup_requests,
            run.empty.rss_bytes as f64 / MIB,
            run.loaded.rss_bytes as f64 / MIB,
            run.loaded.peak_rss_bytes as f64 / MIB,
            per,
            upstream
                .filter(|u| *u > 0.0)
                .map(|u| format!("{:.2}x", per / u))
                .unwrap_or_else(|| "-".into()),
            1000.0 * run.empty.idle_cpu,
            1000.0 * run.loaded.idle_cpu,
        );
    }
    out.push_str(
        "\nOne control plane for every controller; each is started on the empty cluster, \
         then again with every CronJob (daily, none due during the run). Armed: from the \
         start until every CronJob has a timer (shardcron: every replica's /readyz; \
         upstream: its CronJob work queue has synced each CronJob once and is empty). \
         Memory and idle CPU are summed over the controller's processes; for upstream \
         that is kube-controller-manager as a whole, so only the difference between the \
         empty and the loaded run (bytes per CronJob) compares like with like. RSS is \
         read 20 s after armed, idle CPU over the 60 s after that.\n",
    );
    out
}

/// Writes S3's report.json and report.md.
pub fn write_scale(out: &Path, scenario: &Scenario, runs: &[ScaleRun]) -> anyhow::Result<()> {
    write_runs(out, scenario, runs, &scale_markdown(scenario, runs))
}

/// Writes `report.json` (the scenario and its runs) and `report.md`.
pub fn write_runs(
    out: &Path,
    scenario: &Scenario,
    runs: &[impl serde::Serialize],
    markdown: &str,
) -> anyhow::Result<()> {
    std::fs::write(
        out.join("report.json"),
        serde_json::to_vec_pretty(&serde_json::json!({"scenario": scenario, "runs": runs}))?,
    )?;
    std::fs::write(out.join("report.md"), markdown)?;
    Ok(())
}

/// Writes report.json, report.md, skew-cdf.png and jobs-per-second.png.
pub fn write(out: &Path, scenario: &Scenario, runs: &[Run]) -> anyhow::Result<()> {
    write_runs(out, scenario, runs, &markdown(scenario, runs))?;
    match load_font() {
        Some(font) => {
            plotters::style::register_font("sans-serif", FontStyle::Normal, font)
                .map_err(|_| anyhow::anyhow!("the font could not be loaded"))?;
            plot_skew_cdf(&out.join("skew-cdf.png"), scenario, runs)?;
            plot_jobs_per_second(&out.join("jobs-per-second.png"), scenario, runs)?;
        }
        None => eprintln!(
            "report: no TrueType font found (install fonts-dejavu-core or set SHARDCRON_LOADTEST_FONT); plots skipped"
        ),
    }
    Ok(())
}

fn load_font() -> Option<&'static [u8]> {
    let candidates = std::env::var("SHARDCRON_LOADTEST_FONT").into_iter().chain(
        [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        ]
        .map(String::from),
    );
    candidates
        .filter_map(|path| std::fs::read(path).ok())
        .map(|bytes| &*Box::leak(bytes.into_boxed_slice()))
        .next()
}

const COLORS: [RGBColor; 4] = [
    RGBColor(200, 60, 40),
    RGBColor(30, 100, 200),
    RGBColor(20, 150, 70),
    RGBColor(140, 60, 170),
];

fn plot_skew_cdf(path: &Path, scenario: &Scenario, runs: &[Run]) -> anyhow::Result<()> {
    let series = runs.iter().map(|run| {
        let skews = &run.observation.slots.skews_ms;
        let n = skews.len().max(1) as f64;
        let points = skews
            .iter()
            .enumerate()
            .map(|(k, v)| (*v as f64 / 1000.0, (k + 1) as f64 / n));
        (run.variant.clone(), points.collect())
    });
    line_chart(
        path,
        &format!(
            "{:?} ({:?}): creation skew CDF",
            scenario.name, scenario.mode
        ),
        (
            "skew (s): Job visible in a watch minus scheduled time",
            "share of slots",
        ),
        series.collect(),
    )
}

fn plot_jobs_per_second(path: &Path, scenario: &Scenario, runs: &[Run]) -> anyhow::Result<()> {
    let series = runs.iter().map(|run| {
        let points = run
            .observation
            .jobs_per_second
            .iter()
            .enumerate()
            .map(|(s, n)| (s as f64, f64::from(*n)));
        (run.variant.clone(), points.collect())
    });
    line_chart(
        path,
        &format!("{:?} ({:?}): Jobs per second", scenario.name, scenario.mode),
        ("seconds since the first watched slot", "Jobs first seen"),
        series.collect(),
    )
}

/// One line per labelled series, axes from 0 to the largest values.
fn line_chart(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|(_, p)| p.iter());
    let x_max = points().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let y_max = points().map(|p| p.1).fold(1.0, f64::max) * 1.05;
    let mut rgb = vec![0u8; (PLOT_SIZE.0 * PLOT_SIZE.1 * 3) as usize];
    let root = BitMapBackend::with_buffer(&mut rgb, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(plot_error)?;
    for (i, (label, points)) in series.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(plot_error)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    drop(chart);
    drop(root);
    write_indexed_png(path, &rgb, PLOT_SIZE).with_context(|| format!("writing {}", path.display()))
}

const PLOT_SIZE: (u32, u32) = (900, 540);

/// Writes a plot with a palette of 6 levels a channel (216 colours): enough
/// for a chart's few colours and its anti-aliased text, and about a
/// fifteenth of an RGB PNG's bytes, so that the plots committed beside the
/// reports stay small (tests/layers.rs keeps loadtest/report under 3 MB).
fn write_indexed_png(path: &Path, rgb: &[u8], (width, height): (u32, u32)) -> anyhow::Result<()> {
    let level = |channel: u8| (u16::from(channel) + 25) / 51;
    let indices: Vec<u8> = rgb
        .chunks_exact(3)
        .map(|pixel| (level(pixel[0]) * 36 + level(pixel[1]) * 6 + level(pixel[2])) as u8)
        .collect();
    let palette: Vec<u8> = (0..216u16)
        .flat_map(|index| [index / 36, index / 6 % 6, index % 6].map(|level| (level * 51) as u8))
        .collect();
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width, height);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_palette(palette);
    encoder.set_compression(png::Compression::Best);
    encoder.set_filter(png::FilterType::NoFilter);
    encoder.write_header()?.write_image_data(&indices)?;
    Ok(())
}

fn plot_error<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow::anyhow!("plotting failed: {error:?}")
}

/// What a scale-out replica received in the window from the watches of
/// `resource` (`jobs`: both Job watches; `cronjobs`: batch/v1's or the
/// CRD's), in `figures` (objects or bytes).
fn in_window(figures: &std::collections::BTreeMap<String, f64>, resource: &str) -> f64 {
    let get = |r: &str| figures.get(r).copied().unwrap_or(0.0);
    match resource {
        "jobs" => get("jobs") + get("unlabelled_jobs"),
        "cronjobs" => get("cronjobs") + get("cronjobs.shardcron.io"),
        "all" => figures.values().sum(),
        other => get(other),
    }
}

/// A scale-out run in one line, for progress output.
pub fn scaleout_line(run: &ScaleOutRun) -> String {
    format!(
        "{}: per replica in the window at most {:.0} CronJob and {:.0} Job objects received, {:.2} MiB, CPU {:.1} ms/s, RSS {:.0} MiB",
        run.variant,
        run.max(|f| in_window(&f.window_events, "cronjobs")),
        run.max(|f| in_window(&f.window_events, "jobs")),
        run.max(|f| in_window(&f.window_bytes, "all")) / MIB,
        1000.0 * run.max(|f| f.cpu),
        run.max(|f| f.rss_bytes as f64) / MIB,
    )
}

/// S6's table: per replica (the largest of the N), what it received in the
/// window, its CPU and memory, each against 1/N of the single replica's;
/// and, since the windows of the runs hold different firings, the balance
/// within each run and the sum over its replicas.
pub fn scaleout_markdown(scenario: &Scenario, runs: &[ScaleOutRun]) -> String {
    let mut out = heading(scenario, None);
    let single = runs.iter().find(|r| r.replicas == 1);
    out.push_str(
        "| controller | CronJob objects | vs 1/N | balance | sum | Job objects | vs 1/N | balance | sum | watch MiB | vs 1/N | CPU ms/s | vs 1/N | RSS MiB | vs 1/N |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let n = run.replicas as f64;
        let ratio = |figure: &dyn Fn(&ScaleOutRun) -> f64| {
            single
                .map(figure)
                .filter(|one| *one > 0.0)
                .map(|one| format!("{:.2}", figure(run) / (one / n)))
                .unwrap_or_else(|| "-".into())
        };
        let spread = |figure: &dyn Fn(&ReplicaFigures) -> f64| {
            let sum: f64 = run.per_replica.iter().map(figure).sum();
            let balance = if sum > 0.0 {
                run.max(figure) / (sum / n)
            } else {
                0.0
            };
            format!("{balance:.2} | {sum:.0}")
        };
        let cronjob_objects = |f: &ReplicaFigures| in_window(&f.window_events, "cronjobs");
        let job_objects = |f: &ReplicaFigures| in_window(&f.window_events, "jobs");
        let cronjobs = |r: &ScaleOutRun| r.max(cronjob_objects);
        let jobs = |r: &ScaleOutRun| r.max(job_objects);
        let bytes = |r: &ScaleOutRun| r.max(|f| in_window(&f.window_bytes, "all"));
        let cpu = |r: &ScaleOutRun| r.max(|f| f.cpu);
        let rss = |r: &ScaleOutRun| r.max(|f| f.rss_bytes as f64);
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {:.0} | {} | {} | {:.2} | {} | {:.1} | {} | {:.0} | {} |",
            run.variant,
            cronjobs(run),
            ratio(&cronjobs),
            spread(&cronjob_objects),
            jobs(run),
            ratio(&jobs),
            spread(&job_objects),
            bytes(run) / MIB,
            ratio(&bytes),
            1000.0 * cpu(run),
            ratio(&cpu),
            rss(run) / MIB,
            ratio(&rss),
        );
    }
    out.push_str(
        "\nOne control plane and one set of CronJobs for every run; each run starts N \
         replicas, waits until all are ready, lets 20 s pass, then measures over the \
         window: the objects and bytes each replica's watches received (CronJobs change \
         at every firing, when their status is written), its CPU, and its RSS at the end. \
         Each figure is the largest of the N replicas; \"vs 1/N\" divides it by the \
         single replica's figure over N (1.00: divided evenly; N: every replica reads \
         everything). The runs' windows hold different firings (the steady mix's hourly \
         CronJobs are spread over the hour), so \"balance\" compares the largest replica \
         with the mean of its own run and \"sum\" adds the run's replicas: a sum near \
         the single replica's figure means no object reached two replicas. The initial \
         lists are outside the window: each replica lists its share again at every ring \
         change (in report.json: `events`, `bytes`, from each process's start). RSS \
         includes each process's fixed cost (about 20 MiB with no CronJob), which does \
         not divide.\n",
    );
    let servers: Vec<(&ScaleOutRun, &ApiServerFigures)> = runs
        .iter()
        .filter_map(|run| Some((run, run.api_server.as_ref()?)))
        .collect();
    if servers.is_empty() {
        return out;
    }
    out.push_str(
        "\n### kube-apiserver\n\n\
         | controller | Jobs created | CPU ms/s | CPU ms per Job | CronJob watch KiB sent per Job | vs 1 replica | Job watch KiB sent per Job |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    let single = servers.iter().find(|(run, _)| run.replicas == 1);
    for (run, server) in &servers {
        let cronjob_bytes = server.watch_bytes_per_firing("cronjobs");
        let versus_one = single
            .map(|(_, one)| one.watch_bytes_per_firing("cronjobs"))
            .filter(|one| *one > 0.0)
            .map(|one| format!("{:.2}", cronjob_bytes / one))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {:.1} |",
            run.variant,
            server.sent.job_creates,
            1000.0 * server.cpu,
            server.cpu_ms_per_firing(run.window_seconds),
            cronjob_bytes / 1024.0,
            versus_one,
            server.watch_bytes_per_firing("jobs") / 1024.0,
        );
    }
    out.push_str(
        "\nkube-apiserver's own CPU over each window, and the watch event bytes it \
         sent (`apiserver_watch_events_sizes`, every watcher: the replicas' and \
         kube-controller-manager's, whose share does not change with N), per Job it \
         created (`apiserver_request_total`, POST jobs 201). \"vs 1 replica\": the \
         CronJob bytes per Job against the single replica's (1.00: sharding keeps the \
         server's cost; N: the server sends every replica everything).\n",
    );
    out
}

/// Writes S6's report.json and report.md.
pub fn write_scaleout(out: &Path, scenario: &Scenario, runs: &[ScaleOutRun]) -> anyhow::Result<()> {
    write_runs(out, scenario, runs, &scaleout_markdown(scenario, runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_is_written_with_a_palette_and_keeps_its_colours_near() {
        let path = std::env::temp_dir().join(format!("plot-{}.png", std::process::id()));
        // White, black, and a series' red: (200, 60, 40).
        let rgb = [255, 255, 255, 0, 0, 0, 200, 60, 40, 255, 255, 255];
        write_indexed_png(&path, &rgb, (2, 2)).expect("written");
        let decoder = png::Decoder::new(std::fs::File::open(&path).expect("read back"));
        let mut reader = decoder.read_info().expect("a PNG");
        let palette = reader
            .info()
            .palette
            .clone()
            .expect("a palette")
            .into_owned();
        assert_eq!(palette.len(), 216 * 3);
        let mut indices = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut indices).expect("its pixels");
        let colour = |i: usize| {
            let at = usize::from(indices[i]) * 3;
            (palette[at], palette[at + 1], palette[at + 2])
        };
        assert_eq!(colour(0), (255, 255, 255));
        assert_eq!(colour(1), (0, 0, 0));
        assert_eq!(
            colour(2),
            (204, 51, 51),
            "the nearest of 6 levels a channel"
        );
        let _ = std::fs::remove_file(&path);
    }
}
