//! The engine: events in (model changes), syncs out. Owns the cluster model, the last
//! committed ruleset, the pending conntrack targets and the schedule. Single-threaded:
//! one sync at a time by construction.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube_model::{Cluster, ServiceKey};
use nft_model::Table;

use crate::cleaner::{Cleaner, ToCleaner};
use crate::cleanup::{Cleanup, CleanupConfig};
use crate::heard::Heard;
use crate::isolate::Skips;
use crate::kernel::{Clock, ConntrackKernel, ConntrackOpener, Listening, NftKernel};
use crate::ledger::Ledger;
use crate::schedule::{Periods, Schedule};
use crate::{status, EngineConfig, ForeignWriter, Observer, StatusHandle};

struct NoObserver;
impl Observer for NoObserver {}

/// Where the conntrack cleanup runs.
pub(crate) enum CtLink<C> {
    /// On the engine's thread, right after each commit.
    Here(Box<Cleaner<C>>),
    /// On a thread of its own (`run`), told of each commit by message.
    Beside(BesideTx),
}

/// The channel to a cleaner beside the engine; dropped, it tells the cleaner to end (the
/// event thread holds a sender too, so the channel alone would not close).
pub(crate) struct BesideTx(pub(crate) flume::Sender<ToCleaner>);

impl BesideTx {
    pub(crate) fn send(&self, m: ToCleaner) {
        let _ = self.0.send(m);
    }
}

impl Drop for BesideTx {
    fn drop(&mut self) {
        let _ = self.0.send(ToCleaner::Stop);
    }
}

/// How long the engine waits for the watcher to hear a generation it read (the kernel
/// queued the notifications before answering; the watcher thread only has to read them).
pub(crate) const HEARD_WAIT: Duration = Duration::from_millis(50);

/// The sync engine (see the crate docs and docs/sync.md).
pub struct Engine<N: NftKernel, C: ConntrackKernel, K: Clock> {
    pub(crate) cfg: EngineConfig,
    pub(crate) nft: N,
    /// The conntrack cleanup (None only while it is being moved beside the engine).
    pub(crate) ct: Option<CtLink<C>>,
    pub(crate) clock: K,
    pub(crate) status: StatusHandle,
    pub(crate) observer: Box<dyn Observer>,

    pub(crate) cluster: Cluster,
    /// Latest problem per object (from conversion), for the reports.
    pub(crate) model_errors: BTreeMap<String, Vec<String>>,
    /// Per service that is not (validly) known: the slices naming it, as errors.
    pub(crate) orphans: BTreeMap<ServiceKey, Vec<String>>,
    /// Endpoints in all slices (the report's counter, kept up to date per event).
    pub(crate) endpoints: usize,
    pub(crate) schedule: Schedule,

    /// The incremental compiler: the desired tables (built by the first sync).
    pub(crate) compiler: Option<ruleset::Compiler>,
    /// Before the first sync: the compiler being built while the initial lists arrive
    /// ([`Engine::build_ahead`]); the first sync finishes it.
    pub(crate) building: Option<ruleset::Build>,
    /// What changed since the compiler was last brought up to date.
    pub(crate) changes: ruleset::Changes,
    /// What we know of the kernel's copy of our tables (one writer: its transitions).
    pub(crate) ledger: Ledger,
    /// UDP destinations whose owner or serving endpoints may have changed since our last
    /// commit: the conntrack cleanup judges their flows again after the next one.
    pub(crate) udp_touched: BTreeSet<ruleset::UdpDest>,
    /// Of those, the frontends their service port stopped claiming since our last
    /// commit, with that port as of the commit (deleted when it is no UDP port then).
    pub(crate) udp_released: BTreeMap<ruleset::UdpDest, ruleset::names::PortId>,
    /// The next commit's news for the cleanup is the whole state (first commit, a
    /// rebuild, a commit after an unknown outcome): every flow is judged again.
    pub(crate) judge_full: bool,
    /// Services whose status facts (health checks, local endpoints) are to be looked
    /// at again after the next successful sync.
    pub(crate) status_dirty: BTreeSet<ServiceKey>,
    pub(crate) per_service: status::PerService,
    /// Failed attempts at `KUBE-FORWARD` in this run (logged at the 1st, 2nd, 4th...).
    pub(crate) forward_failures: u64,
    /// The step to run once after the first successful sync (None: none, or run).
    pub(crate) first_sync_step: Option<Box<dyn crate::kernel::FirstSyncStep>>,
    /// Service ports left out because the kernel refused their rules.
    pub(crate) skips: Skips,
    /// Trigger times of the EndpointSlice changes not yet synced (for the network
    /// programming latency), and when the engine started (older ones are not counted,
    /// as in kube-proxy).
    pub(crate) trigger_times: Vec<(kube_model::IpFamily, SystemTime)>,
    pub(crate) started_wall: SystemTime,
    /// Conflicts between services in the committed rules (logged once each).
    pub(crate) conflicts: std::collections::BTreeSet<String>,
    /// The watcher's subscription, dropped for the time of each of our large commits
    /// (None: no watcher, or it could not be taken again once).
    pub(crate) listening: Option<Box<dyn Listening>>,
    /// Every transaction the watcher heard (None: no watcher): tells other programs'
    /// commits to their own tables from a reason to read ours back.
    pub(crate) heard: Option<Arc<Heard>>,
}

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    pub fn new(cfg: EngineConfig, nft: N, ct: C, clock: K) -> Engine<N, C, K> {
        let status = StatusHandle::default();
        let state = cleanup_state(&cfg, clock.now());
        let cleaner = Cleaner::new(state, ct, status.clone());
        Engine::with_cleaner(cfg, nft, cleaner, clock, status)
    }

    /// An engine whose conntrack socket is opened by `open`: if that fails (no
    /// ctnetlink, or the probe fails), rules are still programmed, the cleanup is
    /// reported unavailable, stale flows wait, and `open` is tried again every
    /// `conntrack_reprobe`; once it opens, every UDP flow is judged once.
    pub fn with_conntrack_opener(
        cfg: EngineConfig,
        nft: N,
        open: ConntrackOpener<C>,
        clock: K,
    ) -> Engine<N, C, K> {
        let status = StatusHandle::default();
        let now = clock.now();
        let state = cleanup_state(&cfg, now);
        let cleaner = Cleaner::with_opener(state, open, cfg.conntrack_reprobe, status.clone(), now);
        Engine::with_cleaner(cfg, nft, cleaner, clock, status)
    }

    fn with_cleaner(
        cfg: EngineConfig,
        nft: N,
        cleaner: Cleaner<C>,
        clock: K,
        status: StatusHandle,
    ) -> Engine<N, C, K> {
        status.update(|s| s.sync_period = cfg.sync_period);
        let schedule = Schedule::new(Periods {
            min_sync: cfg.min_sync_period,
            sync: cfg.sync_period,
            retry_initial: cfg.retry_initial,
            retry_max: cfg.retry_max,
            repair_initial: cfg.repair_initial,
            repair_max: cfg.repair_max,
            repair_quiet: cfg.repair_quiet,
        });
        Engine {
            cfg,
            nft,
            ct: Some(CtLink::Here(Box::new(cleaner))),
            clock,
            status,
            observer: Box::new(NoObserver),
            cluster: Cluster::new(),
            model_errors: BTreeMap::new(),
            orphans: BTreeMap::new(),
            endpoints: 0,
            schedule,
            compiler: None,
            building: None,
            changes: ruleset::Changes::default(),
            ledger: Ledger::new(),
            udp_touched: BTreeSet::new(),
            udp_released: BTreeMap::new(),
            judge_full: true,
            status_dirty: BTreeSet::new(),
            per_service: status::PerService::default(),
            forward_failures: 0,
            first_sync_step: None,
            skips: Skips::default(),
            trigger_times: Vec::new(),
            started_wall: SystemTime::now(),
            conflicts: Default::default(),
            listening: None,
            heard: None,
        }
    }

    pub fn set_observer(&mut self, o: Box<dyn Observer>) {
        self.observer = o;
    }

    pub fn status(&self) -> StatusHandle {
        self.status.clone()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The cluster model as the engine sees it.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The ruleset as of the last successful commit (None: not known, e.g. after a
    /// failed one). Built on demand from the compiler's tables.
    pub fn committed(&self) -> Option<Vec<Table>> {
        self.ledger.held()?;
        Some(self.compiler.as_ref()?.tables())
    }

    /// The incremental compiler (None before the first sync).
    pub fn compiler(&self) -> Option<&ruleset::Compiler> {
        self.compiler.as_ref()
    }

    /// The conntrack cleanup's state, when it runs on the engine's thread.
    pub fn cleanup(&self) -> Option<&Cleanup> {
        match self.ct.as_ref()? {
            CtLink::Here(c) => Some(c.state()),
            CtLink::Beside(_) => None,
        }
    }

    /// Whether the conntrack cleanup can run (ctnetlink open).
    pub fn conntrack_available(&self) -> bool {
        match self.ct.as_ref() {
            Some(CtLink::Here(c)) => c.available(),
            _ => self.status.read(|s| s.cleanup_unavailable.is_none()),
        }
    }

    /// Whether a change is queued and not yet applied.
    pub fn is_dirty(&self) -> bool {
        self.schedule.dirty()
    }

    /// The loop's schedule (state and due times).
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The clock the engine runs on.
    pub fn clock(&self) -> &K {
        &self.clock
    }

    /// Ask for a full sync at once (an explicit resync).
    pub fn request_repair(&mut self) {
        self.schedule.repair_requested();
    }

    /// Other programs changed our tables (`touches`, from the nftables watcher), or
    /// notifications were lost (`overflow`): repair with a full sync, at once after a
    /// quiet time, with a growing delay while the tables are fought over. Each writer is
    /// counted (status, observer) and logged (WARN when a repair is scheduled).
    ///
    /// Transactions of our own commits (by generation) are not foreign; lost
    /// notifications are not either when the kernel's generation is still the one our
    /// last commit produced (nobody committed after it: e.g. our own large batch
    /// overflowed the watcher's socket).
    pub fn foreign_change(&mut self, touches: &[crate::watch::Touch], overflow: bool) {
        let touches: Vec<&crate::watch::Touch> = touches
            .iter()
            .filter(|t| !self.ledger.is_ours(t.genid))
            .collect();
        let overflow = overflow && !self.kernel_holds_our_commit();
        if touches.is_empty() && !overflow {
            return;
        }
        let now = self.clock.now();
        let was_repairing = self.schedule.state() == crate::schedule::State::Repair;
        let delay = self.schedule.foreign_change(now);
        let writers: Vec<ForeignWriter> = touches
            .iter()
            .map(|t| ForeignWriter {
                pid: t.pid,
                process: t.proc_name.clone(),
            })
            .collect();
        for w in &writers {
            self.observer.foreign_write(w);
        }
        let last = writers.last().cloned();
        self.status.update(|s| {
            s.foreign_writes += writers.len() as u64;
            if last.is_some() {
                s.last_foreign_writer = last.clone();
            }
            s.repair_delay = delay;
        });
        let (pid, process) = last.map_or((0, String::new()), |w| {
            (w.pid.unwrap_or(0), w.process.unwrap_or_default())
        });
        if !was_repairing {
            tracing::warn!(
                pid,
                process = %process,
                transactions = touches.len(),
                notifications_lost = overflow,
                repair_in_ms = delay.as_millis() as u64,
                streak = self.schedule.repair_streak(),
                "another program changed our nftables tables; repairing"
            );
        } else {
            tracing::debug!(pid, process = %process, transactions = touches.len(),
                "another program changed our nftables tables again; repair already scheduled");
        }
    }

    /// Whether a batch of ours was committed by this engine.
    pub fn has_committed(&self) -> bool {
        self.ledger.has_committed()
    }

    /// Run `step` once, right after the first successful sync (its nftables commits
    /// are then known as ours: see [`crate::FirstSyncStep`]).
    pub fn after_first_sync(&mut self, step: Box<dyn crate::kernel::FirstSyncStep>) {
        self.first_sync_step = Some(step);
    }

    /// The watcher's subscription: from now on it is dropped for the time of each of
    /// our commits, so that the kernel builds no notification of our own elements
    /// ([`Listening`]).
    pub fn quiet_own_commits(&mut self, l: Box<dyn Listening>) {
        self.listening = Some(l);
    }

    /// What the watcher hears, written by its thread (see [`Heard`]).
    pub fn hear(&mut self, heard: Arc<Heard>) {
        self.heard = Some(heard);
    }

    /// Whether every transaction after generation `from` up to `to` was ours or another
    /// program's that touched none of our tables (false when nothing was heard).
    pub(crate) fn others_only(&self, from: u32, to: u32) -> bool {
        let Some(h) = &self.heard else {
            return from == to;
        };
        let ledger = &self.ledger;
        let moved_on = h.others_only(from, to, &|g| ledger.is_ours(g), HEARD_WAIT);
        if moved_on && from != to {
            tracing::trace!(from, to, "only other programs' tables changed meanwhile");
        }
        moved_on
    }

    /// The nftables watcher was just opened: whatever another program committed
    /// before it listened is only visible in the generation. One that is not our last
    /// commit's (while we trust the kernel to hold it) is handled as lost
    /// notifications: a repair.
    pub fn watcher_opened(&mut self) {
        let Some(ours) = self.ledger.held() else {
            return; // a verification is already due
        };
        match self.nft.generation() {
            Ok(g) if g == ours => {}
            Ok(_) => self.foreign_change(&[], true),
            Err(e) => {
                tracing::warn!(error = %e, "reading the nftables generation");
                self.foreign_change(&[], true);
            }
        }
    }

    /// Whether the kernel's generation is the one our last commit produced.
    fn kernel_holds_our_commit(&mut self) -> bool {
        let Some(ours) = self.ledger.held() else {
            return false;
        };
        match self.nft.generation() {
            Ok(g) => g == ours,
            Err(e) => {
                tracing::warn!(error = %e, "reading the nftables generation");
                false
            }
        }
    }

    pub(crate) fn queue(&mut self) {
        let now = self.clock.now();
        if self.schedule.changed(now) {
            let wall = SystemTime::now();
            self.status.update(|s| {
                s.queued_since = Some(now);
                s.queued_since_wall = Some(wall);
            });
        }
    }

    /// Keep an object's problems for the reports; log them when they are new (an object
    /// sent again with the same problems, e.g. a Node's status updates, is not logged
    /// again).
    pub(crate) fn note_errors(
        &mut self,
        object: String,
        mut warnings: Vec<String>,
        err: Option<String>,
    ) {
        warnings.extend(err);
        if warnings.is_empty() {
            self.model_errors.remove(&object);
        } else if self.model_errors.get(&object) != Some(&warnings) {
            for w in &warnings {
                tracing::warn!(%object, error = %w, "invalid object");
            }
            self.model_errors.insert(object, warnings);
        }
    }

    /// A service's Service or one of its slices changed: recompile it at the next
    /// sync, look at its status facts again, and keep its slices' orphan errors.
    pub(crate) fn touched(&mut self, key: &ServiceKey) {
        self.changes.services.insert(key.clone());
        self.status_dirty.insert(key.clone());
        let orphans: Vec<String> = if self.cluster.services.contains_key(key) {
            Vec::new()
        } else {
            self.cluster
                .slices_of(key)
                .map(|s| {
                    kube_model::ObjectError::MissingService {
                        object: kube_model::ObjectRef::new(
                            kube_model::Kind::EndpointSlice,
                            s.key.namespace.clone(),
                            s.key.name.clone(),
                        ),
                        service: key.to_string(),
                    }
                    .to_string()
                })
                .collect()
        };
        if orphans.is_empty() {
            self.orphans.remove(key);
        } else {
            self.orphans.insert(key.clone(), orphans);
        }
    }

    /// Whether both sources delivered their initial list.
    pub fn listed(&self) -> bool {
        self.schedule.listed()
    }

    /// When the next sync is due (None: not before the initial lists). See
    /// [`crate::schedule`].
    pub fn next_sync_at(&self) -> Option<Instant> {
        self.schedule.due(self.clock.now())
    }
}

/// The cleanup's state for an engine with this configuration.
fn cleanup_state(cfg: &EngineConfig, now: Instant) -> Cleanup {
    Cleanup::new(
        CleanupConfig {
            retry_initial: cfg.retry_initial,
            retry_max: cfg.retry_max,
            deletes_per_job: cfg.cleanup_slice_targets.max(1),
            scopes_per_job: cfg.cleanup_slice_targets.max(1),
            ..CleanupConfig::default()
        },
        cfg.ruleset.families.clone(),
        now,
    )
}
