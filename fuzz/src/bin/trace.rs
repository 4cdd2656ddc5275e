//! AFL++ target `trace`: see `stowage_fuzz::trace`.

fn main() {
    stowage_fuzz::init_trace();
    afl::fuzz!(|data: &[u8]| stowage_fuzz::trace(data));
}
