//! AFL++ target `fleet`: see `stowage_fuzz::fleet`.

fn main() {
    stowage_fuzz::init_fleet();
    afl::fuzz!(|data: &[u8]| stowage_fuzz::fleet(data));
}
