use std::cell::RefCell;

use proptest::prelude::*;
use sha2::{Digest, Sha256};

use super::*;
use crate::conventions::messages::parts::{input_parts_in_text, MessagePart};
use crate::registry::CallKey;

const TRACE: [u8; 16] = [7; 16];
const OTHER_TRACE: [u8; 16] = [9; 16];

/// The parts of a message list's text as the engine builds them (response fingerprinted).
fn read_parts(text: &str) -> Option<Vec<ToolCallPart>> {
    let parts = input_parts_in_text(text)?;
    Some(
        parts
            .into_iter()
            .map(|part| match part {
                MessagePart::Response { id, response } => ToolCallPart {
                    call_id: CallKey::of(&id),
                    tool_name: None,
                    call_fingerprint: None,
                    result_fingerprint: Some(Sha256::digest(format!("{response:?}")).into()),
                    traits: Default::default(),
                },
                MessagePart::Call { .. } => unreachable!("input messages hold responses"),
            })
            .collect(),
    )
}

/// `read_parts`, recording every text it was asked to read.
struct Recorder(RefCell<Vec<String>>);

impl Recorder {
    fn new() -> Recorder {
        Recorder(RefCell::new(Vec::new()))
    }

    fn read(&self) -> impl Fn(&str) -> Option<Vec<ToolCallPart>> + '_ {
        |text| {
            self.0.borrow_mut().push(text.to_owned());
            read_parts(text)
        }
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.borrow_mut())
    }

    /// Asks `cache` for the parts of `text` in `trace`, asserts they are what reading the
    /// whole text gives, and returns the texts read since the last `take`.
    fn reads(&self, cache: &Conversations, trace: &[u8], text: &str) -> Vec<String> {
        assert_eq!(
            cache.parts(trace, text, self.read()),
            read_parts(text),
            "{text}"
        );
        self.take()
    }
}

fn message(i: usize) -> String {
    format!(
        r#"{{"role":"tool","parts":[{{"type":"tool_call_response","id":"call_{i}","response":{{"n":{i}}}}}]}}"#
    )
}

fn list(messages: &[String]) -> String {
    format!("[{}]", messages.join(","))
}

#[test]
fn a_growing_conversation_reads_only_the_messages_it_gained() {
    let cache = Conversations::default();
    let recorder = Recorder::new();
    let turns: Vec<String> = (0..4).map(message).collect();

    let first = list(&turns[..2]);
    assert_eq!(read_parts(&first).map(|p| p.len()), Some(2));
    assert_eq!(recorder.reads(&cache, &TRACE, &first), vec![first.clone()]);

    let second = list(&turns);
    assert_eq!(read_parts(&second).map(|p| p.len()), Some(4));
    assert_eq!(
        recorder.reads(&cache, &TRACE, &second),
        vec![format!("[{},{}]", turns[2], turns[3])]
    );

    // The same list again reads nothing; an earlier, shorter list is read whole.
    assert!(recorder.reads(&cache, &TRACE, &second).is_empty());
    assert_eq!(recorder.reads(&cache, &TRACE, &first), vec![first.clone()]);

    // Another trace shares nothing.
    assert_eq!(recorder.reads(&cache, &OTHER_TRACE, &second), vec![second]);
}

#[test]
fn text_that_does_not_continue_the_list_is_read_whole() {
    let cache = Conversations::default();
    let recorder = Recorder::new();
    let turns: Vec<String> = (0..3).map(message).collect();
    let first = list(&turns[..2]);
    cache.parts(&TRACE, &first, recorder.read());
    recorder.take();

    for text in [
        // A changed earlier message.
        list(&[message(5), turns[1].clone(), turns[2].clone()]),
        // One message, not a list.
        turns[0].clone(),
    ] {
        assert_eq!(
            recorder.reads(&cache, &TRACE, &text).last(),
            Some(&text),
            "{text}"
        );
    }
    // The remembered bytes followed by more of the same element, not by `,` or `]`.
    let short = format!("[{},1]", turns[0]);
    let longer = format!("[{},12]", turns[0]);
    let mut reads = recorder.reads(&cache, &OTHER_TRACE, &short);
    reads.extend(recorder.reads(&cache, &OTHER_TRACE, &longer));
    assert_eq!(reads, vec![short, longer]);
}

#[test]
fn not_json_is_none_as_the_whole_read_says() {
    let cache = Conversations::default();
    let recorder = Recorder::new();
    let turns: Vec<String> = (0..2).map(message).collect();
    cache.parts(&TRACE, &list(&turns[..1]), recorder.read());
    let broken = format!("[{},{{\"role\":]", turns[0]);
    assert_eq!(read_parts(&broken), None);
    assert_eq!(cache.parts(&TRACE, &broken, recorder.read()), None);
    // Trailing text after the list is not JSON either.
    let trailing = format!("{} x", list(&turns[..1]));
    assert_eq!(read_parts(&trailing), None);
    assert_eq!(cache.parts(&TRACE, &trailing, recorder.read()), None);
    // An invalid trace_id is never remembered.
    recorder.reads(&cache, &[1, 2], &list(&turns));
}

#[test]
fn memory_is_bounded_by_parts_and_lists_per_trace() {
    let cache = Conversations::new(16);
    let recorder = Recorder::new();
    let turns: Vec<String> = (0..5).map(message).collect();
    // Five different conversations of one trace: at most MAX_PER_TRACE kept.
    for i in 0..5 {
        cache.parts(&TRACE, &list(&turns[i..i + 1]), recorder.read());
    }
    assert_eq!(cache.remembered_parts(), MAX_PER_TRACE);
    // Traces beyond 16 parts in all drop the least recently used.
    for t in 0..10u8 {
        cache.parts(&[t + 20; 16], &list(&turns[..3]), recorder.read());
    }
    assert!(
        cache.remembered_parts() <= 16,
        "{}",
        cache.remembered_parts()
    );
    // A list of more than a quarter of the bound is read, not remembered.
    let before = cache.remembered_parts();
    cache.parts(&[99; 16], &list(&turns), recorder.read());
    assert_eq!(cache.remembered_parts(), before);
}

/// The recorded corpus through two engines, one remembering conversations and one not:
/// the same forwarded bytes and the same detections, request by request.
#[test]
fn the_corpus_gives_the_same_requests_and_detections_as_reading_every_list_whole() {
    use crate::engine::Engine;
    use crate::otlp::wire::WireRequest;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("corpus folder") {
            let path = entry.expect("corpus entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "pb") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 100, "{} corpus requests", files.len());
    let mut config = crate::config::Config::default();
    config.detection.fingerprint_key = Some("test".into());
    let remembering = Engine::from_config(&config).expect("default config");
    let mut reading = Engine::from_config(&config).expect("default config");
    reading.conversations = Conversations::new(0);
    let now = std::time::Instant::now();
    let mut detections = 0;
    for file in &files {
        let bytes = bytes::Bytes::from(std::fs::read(file).expect("corpus request"));
        let process = |engine: &Engine| {
            let read = WireRequest::read(bytes.clone()).expect("reads");
            engine.process_wire(read, now).expect("processes")
        };
        let (a, b) = (process(&remembering), process(&reading));
        assert_eq!(a.bytes(), b.bytes(), "{}", file.display());
        let a_detections = format!("{:?}", a.processed.detections);
        assert_eq!(
            a_detections,
            format!("{:?}", b.processed.detections),
            "{}",
            file.display()
        );
        detections += a.processed.detections.len();
    }
    assert!(detections > 10, "{detections} detections");
    assert!(remembering.conversations.remembered_parts() > 0);
    assert_eq!(reading.conversations.remembered_parts(), 0);
}

proptest! {
    /// Over conversations that grow, repeat, restart or break, in any order and with any
    /// whitespace, the answer is always the whole text's.
    #[test]
    fn always_the_answer_of_reading_the_whole_text(
        steps in prop::collection::vec((0usize..2, 0usize..8, 0usize..4, any::<bool>()), 1..24),
    ) {
        let cache = Conversations::new(64);
        let messages: Vec<String> = (0..8).map(message).collect();
        let space = ["", " ", "\n  ", "\t"];
        for (trace, len, ws, broken) in steps {
            let sep = format!("{},{}", space[ws], space[(ws + 1) % 4]);
            let mut text = format!("{}[{}{}]{}", space[ws], space[ws], messages[..len].join(&sep), space[ws]);
            if broken {
                text.insert(text.len() / 2, '"');
            }
            let trace_id = [trace as u8 + 1; 16];
            prop_assert_eq!(cache.parts(&trace_id, &text, read_parts), read_parts(&text), "{}", text);
        }
    }
}
