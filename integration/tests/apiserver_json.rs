//! `apiserver`'s tests with `application/json` (the file is shared; see apiserver.rs).

#[path = "apiserver.rs"]
mod json;
