//! A stand-in kubelet for the shim's tests (`tests/shim_trust.rs`): a real CRI client that the
//! shim can tell for a kubelet. Copied to a file named `kubelet-v1.30.2`, it is a process named
//! like a kubelet, and `--version` answers as kubelet v1.30.2 does (`Kubernetes v1.30.2`), from
//! its own file name. `list ENDPOINT` lists the containers over CRI and prints one
//! `ID HASH` line each. `sleep SECONDS` is a kubelet that runs and does nothing.

use kubehash::runtime::cri::{keys, Cri};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--version"] => {
            let exe = std::env::current_exe()?;
            let name = exe.file_name().unwrap_or_default().to_string_lossy();
            let version = name.strip_prefix("kubelet-").unwrap_or("unknown");
            println!("Kubernetes {version}");
        }
        ["list", endpoint] => {
            let mut cri = Cri::connect(endpoint).await?;
            for c in cri.list_containers().await? {
                let hash = c.annotations.get(keys::HASH).cloned().unwrap_or_default();
                println!("{} {hash}", c.id);
            }
        }
        ["sleep", seconds] => {
            tokio::time::sleep(std::time::Duration::from_secs(seconds.parse()?)).await;
        }
        _ => anyhow::bail!("usage: kubelet-vX.Y.Z --version | list ENDPOINT | sleep SECONDS"),
    }
    Ok(())
}
