//! Any bytes given to the `.tns` parser give a tensor or an error, never a panic; a
//! parsed tensor written back reads back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok((x, _)) = sptmc::tensor::tns::parse(data, Path::new("fuzz.tns")) {
        let mut text = Vec::new();
        sptmc::tensor::tns::write_to(&mut text, &x).expect("writing to memory succeeds");
        let (y, _) = sptmc::tensor::tns::parse(&text, Path::new("fuzz.tns"))
            .expect("written text parses");
        // Dims come back as the largest index when the input had a header.
        assert_eq!(x.values(), y.values());
        for m in 0..x.order() {
            assert_eq!(x.indices(m), y.indices(m));
        }
    }
});
