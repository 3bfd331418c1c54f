//! Pinning a static pod's UID into a manifest of any bytes: `pin_text` refuses, or writes the
//! old text with one insertion that `check_pin` proves; it never panics.
#![no_main]

use kubehash::rewrite::pin::{check_pin, pin_text};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let uid = "0a1b2c3d-0000-4000-8000-00000000abcd";
    let Ok(new) = pin_text(data, uid) else {
        return;
    };
    check_pin(data, &new, uid).expect("a pin pin_text wrote fails check_pin");
    // One insertion: the old text is the new one's head and tail.
    let head = data.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let tail = data[head..]
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    assert_eq!(head + tail, data.len(), "more than one insertion");
    assert!(String::from_utf8_lossy(&new[head..new.len() - tail]).contains(uid));
});
