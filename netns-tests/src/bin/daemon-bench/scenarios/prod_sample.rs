//! What `change --shape prod` measures, shared by its run (`prod`) and its comparison
//! with a neighbour (`neighbour`): the change kinds, in their order, and one change's
//! measurement.

/// The change kinds, by which a run's samples are indexed.
pub const KINDS: [&str; 5] = [
    "endpoint added",
    "endpoint removed",
    "service created",
    "service deleted",
    "UDP endpoint removed",
];

/// One change measured from outside (ms from the double's write to the watch).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub kernel: f64,
    pub first_packet: Option<f64>,
    pub ack: Option<f64>,
    /// Element notifications in the transaction that held it.
    pub elements: usize,
    /// Another sync (the periodic resync) ran between the quiet wait and the change's
    /// own: the change may wait for minSyncPeriod (judged against minSyncPeriod + 20
    /// ms, not 5 ms).
    pub held: bool,
}
