//! AFL++ target `render_manifest`: see `stowage_fuzz::render_manifest`.

fn main() {
    stowage_fuzz::init_render_manifest();
    afl::fuzz!(|data: &[u8]| stowage_fuzz::render_manifest(data));
}
