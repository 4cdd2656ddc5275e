//! The upstream objects the playground installs each read as one Kubernetes object with the
//! YAML reader every loader uses.

#[test]
fn every_bundled_file_parses_as_one_kubernetes_object() {
    for file in upstream::all() {
        let v: serde_json::Value =
            input_limits::yaml::from_str(file.text).unwrap_or_else(|e| panic!("{}: {e}", file.path));
        assert!(v.get("apiVersion").is_some() && v.get("kind").is_some(), "{}", file.path);
    }
}
