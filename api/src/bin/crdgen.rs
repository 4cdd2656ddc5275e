//! Writes our CRDs into `manifests/crds/` (run from the workspace root).

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crds"));
    std::fs::create_dir_all(dir)?;
    for (name, yaml) in api::stowage::crds() {
        std::fs::write(dir.join(&name), yaml)?;
        println!("wrote manifests/crds/{name}");
    }
    Ok(())
}
