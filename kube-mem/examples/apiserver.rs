//! Runs the in-memory API server until Ctrl-C and prints a kubeconfig path: for poking at it
//! with kubectl by hand (`cargo run -p kube-mem --example apiserver`).

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let server = kube_mem::ApiServer::start().await?;
    let path = std::env::temp_dir().join("stowage-apiserver.kubeconfig");
    std::fs::write(&path, server.kubeconfig("local"))?;
    println!("serving {} ; kubectl --kubeconfig {}", server.url(), path.display());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
