//! The upstream objects compiled into the binary are the ones in `shared/upstream/`, byte for
//! byte: a new upstream release reaches the playground only by copying its files here.

use std::path::Path;

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");

#[test]
fn bundled_upstream_files_are_the_shared_ones() {
    let shared = Path::new(SHARED);
    assert!(shared.is_dir(), "{SHARED} is missing: the tests need ../shared beside the repository");
    let mut checked = 0;
    for file in upstream::all() {
        let reference = std::fs::read_to_string(shared.join(file.path))
            .unwrap_or_else(|e| panic!("{}: {e}", shared.join(file.path).display()));
        assert!(reference == file.text, "upstream/{} differs from shared/upstream/{}", file.path, file.path);
        checked += 1;
    }
    assert_eq!(checked, 21);
}
