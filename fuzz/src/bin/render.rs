//! AFL++ target `render`: see `stowage_fuzz::render`.

fn main() {
    stowage_fuzz::init_render();
    afl::fuzz!(|data: &[u8]| stowage_fuzz::render(data));
}
