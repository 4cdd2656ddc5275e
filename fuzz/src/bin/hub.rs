//! AFL++ target `hub`: see `stowage_fuzz::hub`.

fn main() {
    stowage_fuzz::init_hub();
    afl::fuzz!(|data: &[u8]| stowage_fuzz::hub(data));
}
