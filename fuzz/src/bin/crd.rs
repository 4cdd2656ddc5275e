//! AFL++ target `crd`: see `stowage_fuzz::crd`.

fn main() {
    stowage_fuzz::init_crd();
    afl::fuzz!(|data: &[u8]| stowage_fuzz::crd(data));
}
