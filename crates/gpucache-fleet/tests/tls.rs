//! `rediss://` against a real redis-server with TLS (a CA and certificate made with `openssl`
//! for this test, the CA trusted through `SSL_CERT_FILE`). Only with the `tls-rustls` feature:
//! `cargo test -p gpucache-fleet --features tls-rustls --test tls`.
#![cfg(feature = "tls-rustls")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use gpucache_fleet::testing::RedisServer;

#[test]
fn a_round_trip_over_tls() {
    if skip_without_redis() {
        return;
    }
    let tmp = tmp();
    let d = tmp.path();
    // A CA, and a server certificate for localhost signed by it.
    let openssl = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(d)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    let ok = openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
    ]) && openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "cert.pem",
    ]);
    if !ok {
        eprintln!("skipped: openssl cannot make the certificates");
        return;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (cert, key) = (d.join("cert.pem"), d.join("key.pem"));
    let redis = RedisServer::start(&[
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--tls-ca-cert-file",
        d.join("ca.pem").to_str().unwrap(),
        "--tls-auth-clients",
        "no",
    ])
    .unwrap();
    std::env::set_var("SSL_CERT_FILE", d.join("ca.pem"));
    let url = format!("rediss://localhost:{port}");
    let kf = key_file(d, "fleet.key", &[0x61; 32]);
    {
        let one = machine(&d.join("one"), &url, &kf, false);
        one.cache.insert(b"over tls", value(1, 5000)).unwrap();
        one.cache.flush().unwrap();
        let sent = one.fleet.wait_for_push(Duration::from_secs(30));
        let tier = one.cache.stats().tiers.pop().unwrap();
        assert!(sent, "{:?}", tier.last_error);
        assert_eq!(
            one.fleet.fleet_stats().pushed,
            1,
            "{:?}",
            one.fleet.fleet_stats()
        );
    }
    let two = machine(&d.join("two"), &url, &kf, true);
    two.cache.wait_for_preload();
    assert_eq!(
        two.cache.memory().get(b"over tls").as_deref(),
        Some(&value(1, 5000)[..])
    );
    // The plain port sees the entry too: the same server.
    assert!(
        redis
            .cli(&["DBSIZE"])
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
}
