//! planb-log's tests: appending and reading back, crashes at every write,
//! damage found and repaired, and the fuzz targets' smoke run. One test
//! binary with a module per subject.

mod append_read;
mod crash;
mod damage;
mod fuzz_smoke;
