use super::*;

fn open(dir: &Path) -> (DiskQueue, Vec<StoredRequest>) {
    DiskQueue::open(dir).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn appended_requests_survive_reopen_in_order_until_removed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (store, found) = open(dir.path());
    assert!(found.is_empty());
    let keys: Vec<u64> = [(3, &b"abc"[..]), (1, b"d"), (2, b"ef")]
        .into_iter()
        .map(|(spans, bytes)| {
            store
                .append(spans, Bytes::from_static(bytes))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    assert_eq!(keys, vec![0, 1, 2]);
    assert!(store.remove(&[1]).is_ok());
    assert_eq!(store.len().ok(), Some(2));
    drop(store);

    let (store, found) = open(dir.path());
    assert_eq!(
        found,
        vec![
            StoredRequest {
                key: 0,
                spans: 3,
                bytes: Bytes::from_static(b"abc")
            },
            StoredRequest {
                key: 2,
                spans: 2,
                bytes: Bytes::from_static(b"ef")
            },
        ]
    );
    // new keys follow the highest one found
    assert_eq!(store.append(1, Bytes::from_static(b"g")).ok(), Some(3));
    assert!(store.remove(&[0, 2, 3]).is_ok());
    assert_eq!(store.is_empty().ok(), Some(true));
}

#[test]
fn concurrent_appends_all_land_with_distinct_keys() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (store, _) = open(dir.path());
    let store = Arc::new(store);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                (0..25u64)
                    .map(|i| store.append(t, Bytes::from(vec![t as u8; i as usize])))
                    .collect::<Result<Vec<u64>, _>>()
            })
        })
        .collect();
    let mut keys: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().ok().and_then(Result::ok).unwrap_or_default())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, (0..200).collect::<Vec<u64>>());
    drop(store);
    let (_, found) = open(dir.path());
    assert_eq!(found.len(), 200);
    assert!(found
        .iter()
        .all(|r| r.bytes.iter().all(|b| u64::from(*b) == r.spans)));
}

#[test]
fn a_second_open_of_the_same_directory_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_held, _) = open(dir.path());
    let err = DiskQueue::open(dir.path()).err().map(|e| e.to_string());
    let want = format!(
        "persistent queue {}: ",
        dir.path().join(FILE_NAME).display()
    );
    assert!(
        err.as_deref().is_some_and(|e| e.starts_with(&want)),
        "{err:?}"
    );
}

#[test]
fn a_directory_that_cannot_be_created_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap_or_else(|e| panic!("{e}"));
    let err = DiskQueue::open(&file.join("queue"))
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("cannot create the directory")),
        "{err:?}"
    );
}
