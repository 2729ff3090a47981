//! Golden tests as data: every folder of tests/golden holds `input.yaml` (Services,
//! EndpointSlices, Node and an `NlproxyConfig` document) and `expected.nft` (the rendered
//! tables, `ip` then `ip6`, preceded by the reported problems as `#` comments).
//! `NLPROXY_BLESS=1 cargo test -p ruleset --test golden` rewrites the expectations.

mod common;

#[test]
fn golden_cases() {
    let bless = std::env::var_os("NLPROXY_BLESS").is_some();
    let mut dirs: Vec<_> = std::fs::read_dir(common::golden_dir())
        .expect("golden dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 15, "golden cases missing");
    let mut failures = Vec::new();
    for dir in &dirs {
        let case = common::load(dir);
        for t in &case.compiled.tables {
            t.validate()
                .unwrap_or_else(|e| panic!("{}: invalid table: {e}", dir.display()));
        }
        let got = common::render(&case);
        let path = dir.join("expected.nft");
        if bless {
            std::fs::write(&path, &got).expect("write expected.nft");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            failures.push(format!(
                "{}: output differs (NLPROXY_BLESS=1 to accept)\n--- want\n{want}\n--- got\n{got}",
                dir.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
