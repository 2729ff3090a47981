//! The command line of `daemon-bench`.

use std::path::PathBuf;

pub struct Opts {
    pub bin: PathBuf,
    pub runs: usize,
    pub services: Option<Vec<u32>>,
    pub endpoints: u32,
    pub seconds: u64,
    pub source: String,
    /// Extra arguments for the daemon run from the API double (`--daemon-arg`).
    pub daemon_args: Vec<String>,
    pub scenarios: Vec<String>,
    /// The cluster: `uniform` (`integration::scale`) or `prod` (`shape`).
    pub shape: String,
    /// The production shape's seed.
    pub seed: u64,
    /// Node namespaces of the `fleet` scenario, one daemon each.
    pub nodes: u32,
    /// Measured changes of the `fleet` scenario.
    pub changes: u32,
    /// `churn-prod`: changes per second (each a run) and conntrack entries.
    pub rate: Vec<u32>,
    pub ct_entries: u64,
    /// `first-packet`: fresh connections per setup, and tables loaded by hand as more setups.
    pub connections: usize,
    pub nft_files: Vec<PathBuf>,
    /// `change --shape prod`: another nftables writer committing this many times a
    /// second to its own table, in every other run (`scenarios::neighbour`).
    pub neighbour: Option<u32>,
}

fn list(v: &str, flag: &str) -> Result<Vec<u32>, String> {
    v.split(',')
        .map(|s| s.parse().map_err(|e| format!("{flag} {s}: {e}")))
        .collect()
}

pub fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        bin: PathBuf::from("target/release/kube-nlproxy"),
        runs: 3,
        services: None,
        endpoints: 10,
        seconds: 60,
        source: "both".into(),
        daemon_args: Vec::new(),
        scenarios: Vec::new(),
        shape: "uniform".into(),
        seed: 1,
        nodes: 5,
        changes: 20,
        rate: vec![100],
        ct_entries: 1_000_000,
        connections: 20_000,
        nft_files: Vec::new(),
        neighbour: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        // `--flag=value` or `--flag value`
        let (a, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut inline = inline;
        let mut val = || {
            inline
                .take()
                .or_else(|| args.next())
                .ok_or(format!("{a} needs a value"))
        };
        match a.as_str() {
            "--bin" => o.bin = PathBuf::from(val()?),
            "--runs" => o.runs = val()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--endpoints" => {
                o.endpoints = val()?.parse().map_err(|e| format!("--endpoints: {e}"))?
            }
            "--seconds" => o.seconds = val()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--source" => o.source = val()?,
            "--daemon-arg" => o.daemon_args.push(val()?),
            "--shape" => {
                o.shape = val()?;
                if o.shape != "uniform" && o.shape != "prod" {
                    return Err(format!("--shape {}: uniform or prod", o.shape));
                }
            }
            "--rate" => o.rate = list(&val()?, "--rate")?,
            "--ct-entries" => {
                o.ct_entries = val()?.parse().map_err(|e| format!("--ct-entries: {e}"))?
            }
            "--connections" => {
                o.connections = val()?.parse().map_err(|e| format!("--connections: {e}"))?
            }
            "--nft-file" => o.nft_files.push(PathBuf::from(val()?)),
            "--neighbour" => {
                o.neighbour = Some(val()?.parse().map_err(|e| format!("--neighbour: {e}"))?)
            }
            "--seed" => o.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--nodes" => o.nodes = val()?.parse().map_err(|e| format!("--nodes: {e}"))?,
            "--changes" => o.changes = val()?.parse().map_err(|e| format!("--changes: {e}"))?,
            "--services" => {
                o.services = Some(
                    val()?
                        .split(',')
                        .map(|s| s.parse().map_err(|e| format!("--services {s}: {e}")))
                        .collect::<Result<_, _>>()?,
                )
            }
            "-h" | "--help" => return Err(String::new()),
            s if !s.starts_with('-') => o.scenarios.push(s.to_string()),
            s => return Err(format!("unknown flag {s}")),
        }
    }
    if o.scenarios.is_empty() {
        return Err("no scenario".into());
    }
    o.runs = o.runs.max(1);
    Ok(o)
}
