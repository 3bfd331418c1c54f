//! `verify`: every journaled container's record still holds exactly the value written, and CRI
//! reports the new hash (after the runtime reloaded its records); every pinned manifest holds
//! the text written. After a rollback, the same for the originals ([`Expect::Original`]).

use crate::error::Result;
use crate::rewrite::journal::{Contents, JournaledWrite};
use crate::rewrite::outcome::CheckOutcome;
use crate::runtime::cri::{keys, Cri};
use crate::runtime::record::RecordStore;

/// What each journaled record, CRI and each pinned manifest must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// What apply wrote: the new hashes, the pinned texts (before the new kubelet starts).
    Written,
    /// What was there before apply: after a rollback (before the old kubelet starts again).
    Original,
}

impl Expect {
    /// What to check a journal against: the originals once a rollback ran after its last
    /// apply ([`Contents::rolled_back`]), otherwise what was written.
    pub fn of(contents: &Contents) -> Expect {
        if contents.rolled_back() {
            Expect::Original
        } else {
            Expect::Written
        }
    }
}

/// Checks every container and manifest the journal says was written, against `expect`.
pub async fn verify(
    cri: &mut Cri,
    store: &impl RecordStore,
    contents: Contents,
    expect: Expect,
) -> Result<Vec<CheckOutcome>> {
    let listed = cri.list_containers().await?;
    let mut out = Vec::new();
    for JournaledWrite {
        id,
        name,
        original,
        written,
        new_hash,
        ..
    } in contents.attempt_writes()
    {
        let (value, hash, what) = match expect {
            Expect::Written => (written, Some(new_hash), "the value kubehash wrote"),
            Expect::Original => {
                // Validated when the journal was read; its hash is what CRI reported before.
                let hash = store
                    .format()
                    .stored_hashes(&id, &original)
                    .ok()
                    .and_then(|h| h.hash);
                (original, hash, "its original value")
            }
        };
        let mut problems = Vec::new();
        match store.read(&id).await {
            Ok(v) if v == value => {}
            Ok(_) => problems.push(format!("the runtime's record does not hold {what}")),
            Err(e) => problems.push(e.to_string()),
        }
        match listed.iter().find(|c| c.id == id) {
            None => problems.push("CRI does not list the container".to_string()),
            Some(c) => match (c.annotations.get(keys::HASH), &hash) {
                (Some(h), Some(want)) if h == want => {}
                (None, None) => {}
                (Some(h), Some(want)) => problems.push(format!(
                    "CRI reports hash {h}, expected {want} (has the runtime been restarted?)"
                )),
                (Some(h), None) => problems.push(format!("CRI reports hash {h}, expected none")),
                (None, Some(_)) => problems.push("CRI reports no hash".to_string()),
            },
        }
        out.push(CheckOutcome {
            manifest: None,
            ok: problems.is_empty(),
            detail: if problems.is_empty() {
                match (expect, &hash) {
                    (Expect::Written, Some(h)) => format!("CRI reports {h}; record as written"),
                    (_, Some(h)) => format!("CRI reports {h}; record holds its original"),
                    (_, None) => "CRI reports no hash; record holds its original".to_string(),
                }
            } else {
                problems.join("; ")
            },
            container_id: id,
            name,
        });
    }
    for pin in contents.attempt_pins() {
        let (text, said) = match expect {
            Expect::Written => (
                &pin.written,
                format!("pins metadata.uid {} as written", pin.uid),
            ),
            Expect::Original => (&pin.original, "holds its original text".to_string()),
        };
        let ok = std::fs::read(&pin.path).is_ok_and(|now| now == *text);
        out.push(CheckOutcome {
            container_id: String::new(),
            name: format!("manifest {}", pin.path),
            ok,
            detail: if ok {
                said
            } else if expect == Expect::Written {
                "the manifest no longer holds the text kubehash wrote".into()
            } else {
                "the manifest does not hold its original text".into()
            },
            manifest: Some(pin.path),
        });
    }
    Ok(out)
}
