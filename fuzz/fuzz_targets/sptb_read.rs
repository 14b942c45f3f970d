//! Any bytes given to the `.sptb` reader give a tensor or an error, never a panic; a
//! tensor read is valid and written back reads back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok((x, _)) = sptmc::tensor::binary::read_bytes(data, Path::new("fuzz.sptb")) {
        assert!(x.is_sorted_unique());
        let dir = std::env::temp_dir().join(format!("sptmc-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let p = dir.join("back.sptb");
        sptmc::tensor::binary::write(&p, &x).expect("writing a valid tensor succeeds");
        assert_eq!(sptmc::tensor::binary::read(&p).expect("written file reads"), x);
    }
});
