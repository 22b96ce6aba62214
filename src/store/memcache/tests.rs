use super::*;

#[test]
fn values_read_as_the_original_reads_them() {
    assert_eq!(count_of("k", b"12"), 12);
    assert_eq!(count_of("k", b"-3"), 0);
    assert_eq!(count_of("k", b"x"), 0);
    assert_eq!(count_of("k", b"99999999999"), 0, "not a 32-bit value");
}

#[test]
fn keys_spread_by_crc32_as_the_original_client() {
    let store = MemcacheStore::new(&MemcacheOptions {
        servers: vec![
            "127.0.0.1:1".into(),
            "127.0.0.1:2".into(),
            "127.0.0.1:3".into(),
        ],
        max_idle: 2,
        tls: None,
    })
    .expect("store");
    // Go: crc32.ChecksumIEEE([]byte("domain_key_value_1700000000")) % 3.
    let key = "domain_key_value_1700000000";
    assert_eq!(
        MemcacheStore::server_of(&store.servers.load(), key),
        (crc32fast::hash(key.as_bytes()) % 3) as usize
    );
    assert_eq!(
        crc32fast::hash(b"123456789"),
        0xCBF4_3926,
        "the IEEE polynomial"
    );
}

#[test]
fn a_new_server_list_keeps_the_servers_that_stay() {
    let store = MemcacheStore::new(&MemcacheOptions {
        servers: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
        max_idle: 2,
        tls: None,
    })
    .expect("store");
    let kept = Arc::clone(&store.servers.load()[1]);
    store
        .set_servers(&["127.0.0.1:2".into(), "127.0.0.1:3".into()])
        .expect("taken");
    assert_eq!(store.servers(), ["127.0.0.1:2", "127.0.0.1:3"]);
    assert!(
        Arc::ptr_eq(&kept, &store.servers.load()[0]),
        "its idle connections stay"
    );
    assert!(
        store.set_servers(&[]).is_err(),
        "an empty list is not taken"
    );
    assert_eq!(store.servers().len(), 2);
}
