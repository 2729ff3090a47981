//! `apiserver_faults`'s tests with `application/json` (the file is shared; see
//! apiserver_faults.rs).

#[path = "apiserver_faults.rs"]
mod json;
