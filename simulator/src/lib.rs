pub mod fleet_file;
pub mod machines;
pub mod trace;
