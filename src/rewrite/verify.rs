//! `verify`: every journaled container's record still holds exactly the value written, and CRI
//! reports the new hash (after the runtime reloaded its records); every pinned manifest holds
//! the text written.

use crate::error::Result;
use crate::rewrite::journal::{Contents, JournaledWrite};
use crate::rewrite::outcome::CheckOutcome;
use crate::runtime::cri::{keys, Cri};
use crate::runtime::record::RecordStore;

/// Checks every container the journal says was written.
pub async fn verify(
    cri: &mut Cri,
    store: &impl RecordStore,
    contents: Contents,
) -> Result<Vec<CheckOutcome>> {
    let listed = cri.list_containers().await?;
    let mut out = Vec::new();
    for JournaledWrite {
        id,
        name,
        written,
        new_hash,
        ..
    } in contents.writes()
    {
        let mut problems = Vec::new();
        match store.read(&id).await {
            Ok(v) if v == written => {}
            Ok(_) => problems
                .push("the runtime's record no longer holds the value kubehash wrote".to_string()),
            Err(e) => problems.push(e.to_string()),
        }
        match listed.iter().find(|c| c.id == id) {
            None => problems.push("CRI does not list the container".to_string()),
            Some(c) => match c.annotations.get(keys::HASH) {
                Some(h) if *h == new_hash => {}
                Some(h) => problems.push(format!(
                    "CRI reports hash {h}, expected {new_hash} (has the runtime been restarted?)"
                )),
                None => problems.push("CRI reports no hash".to_string()),
            },
        }
        out.push(CheckOutcome {
            manifest: None,
            ok: problems.is_empty(),
            detail: if problems.is_empty() {
                format!("CRI reports {new_hash}; record as written")
            } else {
                problems.join("; ")
            },
            container_id: id,
            name,
        });
    }
    for pin in contents.pins() {
        let ok = std::fs::read(&pin.path).is_ok_and(|now| now == pin.written);
        out.push(CheckOutcome {
            container_id: String::new(),
            name: format!("manifest {}", pin.path),
            ok,
            detail: if ok {
                format!("pins metadata.uid {} as written", pin.uid)
            } else {
                "the manifest no longer holds the text kubehash wrote".into()
            },
            manifest: Some(pin.path),
        });
    }
    Ok(out)
}
