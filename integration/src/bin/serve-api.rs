//! `serve-api FILE`: serve the objects of a JSON `kind: List` (e.g. from `gen-manifest`)
//! from the API-server double on 127.0.0.1, print its URL, and serve until killed. For
//! measuring the daemon's API source at scale:
//!
//! ```sh
//! serve-api /tmp/10k.json &   # prints http://127.0.0.1:PORT
//! kube-nlproxy --master http://127.0.0.1:PORT --hostname-override node-a --render-to /tmp/r.nft
//! ```

fn main() {
    let path = std::env::args().nth(1).expect("usage: serve-api FILE");
    let text = std::fs::read_to_string(&path).expect("read the file");
    let list: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    drop(text);
    let server = integration::ApiServer::start();
    for item in list["items"].as_array().expect("a kind: List") {
        server.apply(item.clone());
    }
    drop(list);
    println!("{}", server.url());
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
