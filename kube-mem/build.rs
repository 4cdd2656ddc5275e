//! Compiles the vendored Kubernetes `.proto` files (proto/) into a descriptor set, which the
//! server decodes kubectl's protobuf bodies against.

use std::path::{Path, PathBuf};

use prost::Message;

fn protos(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            protos(&path, root, out)?;
        } else if path.extension().is_some_and(|x| x == "proto") {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("proto");
    println!("cargo:rerun-if-changed=proto");
    let mut files = Vec::new();
    protos(root, root, &mut files)?;
    files.sort();
    let set = protox::compile(&files, [root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("kubernetes.fds");
    std::fs::write(out, set.encode_to_vec())?;
    Ok(())
}
