use super::*;

fn tensor() -> CooTensor {
    CooTensor::new(
        vec![4, 3, 2],
        vec![vec![0, 1, 3], vec![0, 2, 1], vec![1, 0, 1]],
        vec![1.0, 2.0, 3.0],
    )
    .unwrap()
}

fn cp(rank: usize, iters: usize, tol: f64) -> CpRequest {
    CpRequest {
        rank,
        iters,
        tol,
        seed: 1,
        init: None,
    }
}

/// One given rank is every mode's, lowered as the default is; several are kept as
/// given (the request's validation judges them, as it does a 0); none give 8 per
/// mode, lowered to each mode's length
/// and then to the product of the other ranks, so the default fits any shape and
/// passes validation.
#[test]
fn tucker_ranks_broadcast_one_and_default_to_what_fits() {
    assert_eq!(tucker_ranks(Some(&[5]), &[30, 20, 10, 9]), vec![5; 4]);
    // One given is lowered as the default is: mode 3 has 4 rows.
    assert_eq!(tucker_ranks(Some(&[5]), &[30, 20, 10, 4]), vec![5, 5, 5, 4]);
    assert_eq!(tucker_ranks(Some(&[0]), &[30, 20]), vec![0, 0]);
    assert_eq!(tucker_ranks(Some(&[2, 3]), &[30, 20, 10]), vec![2, 3]);
    let cases: [(&[usize], &[usize]); 6] = [
        (&[30, 20, 10, 9], &[8, 8, 8, 8]),
        (&[12, 10, 9, 8, 7, 6, 5, 4], &[8, 8, 8, 8, 7, 6, 5, 4]),
        (&[500, 1, 400], &[8, 1, 8]),
        // 8 > 1 × 1: the core could not use it.
        (&[500, 1, 1], &[1, 1, 1]),
        (&[500, 2, 3], &[6, 2, 3]),
        (&[7], &[1]),
    ];
    for (dims, want) in cases {
        let ranks = tucker_ranks(None, dims);
        assert_eq!(ranks, want, "dims {dims:?}");
        let idx: Vec<Vec<u32>> = dims.iter().map(|_| vec![0]).collect();
        let x = CooTensor::new(dims.to_vec(), idx, vec![1.0]).unwrap();
        let request = TuckerRequest {
            ranks,
            iters: 1,
            tol: 0.0,
            seed: 1,
            init: None,
        };
        request.validate(&x).expect("the default ranks are valid");
    }
}

#[test]
fn each_bad_option_is_named_as_users_give_it() {
    let x = tensor();
    let msg = |r: Result<CpJob>| r.unwrap_err().to_string();
    assert_eq!(
        msg(cp(0, 5, 0.0).validate(&x)),
        "invalid rank: rank must be at least 1, got 0"
    );
    assert_eq!(
        msg(cp(2, 0, 0.0).validate(&x)),
        "invalid option: iters must be at least 1, got 0"
    );
    assert_eq!(
        msg(cp(2, 5, -1.0).validate(&x)),
        "invalid option: tol must be a number ≥ 0 (0 runs every iteration), got -1"
    );
    assert!(msg(cp(4, 5, 0.0).validate(&x)).contains("rank 4 exceeds the tensor's 3 nonzeros"));
    let empty = CooTensor::new(vec![3, 4, 5], vec![vec![]; 3], vec![]).unwrap();
    assert_eq!(
        msg(cp(1, 5, 0.0).validate(&empty)),
        "invalid tensor: the tensor has no nonzeros"
    );
    assert!(cp(3, 5, 0.0).validate(&x).is_ok());
    let tucker = |ranks: Vec<usize>| TuckerRequest {
        ranks,
        iters: 3,
        tol: 0.0,
        seed: 1,
        init: None,
    };
    let err = tucker(vec![2, 0, 2]).validate(&x).unwrap_err().to_string();
    assert_eq!(err, "invalid rank: ranks[1] must be at least 1, got 0");
    let err = tucker(vec![2, 2]).validate(&x).unwrap_err().to_string();
    assert!(err.contains("2 ranks for a tensor of order 3"), "{err}");
    assert_eq!(
        count("seed", -2).unwrap_err().to_string(),
        "invalid option: seed must not be negative, got -2"
    );
    assert_eq!(count("seed", 7).unwrap(), 7);
}

#[test]
fn cp_apr_and_completion_name_their_own_options() {
    let x = tensor();
    let apr = CpAprRequest {
        rank: 2,
        iters: 3,
        inner: 0,
        ..CpAprRequest::defaults()
    };
    let err = apr.clone().validate(&x).unwrap_err().to_string();
    assert!(err.contains("inner must be at least 1, got 0"), "{err}");
    let err = CpAprRequest {
        inner: 2,
        stoptime: 0.0,
        ..apr
    }
    .validate(&x)
    .unwrap_err()
    .to_string();
    assert!(err.contains("stoptime must be > 0, got 0"), "{err}");
    let completion = CompletionRequest {
        rank: 2,
        epochs: 0,
        seed: 0,
        ..CompletionRequest::defaults()
    };
    let err = completion.validate(&x, &x).unwrap_err().to_string();
    assert!(err.contains("epochs must be at least 1, got 0"), "{err}");
    let job = CompletionRequest {
        epochs: 3,
        ..completion
    }
    .validate(&x, &x)
    .unwrap();
    assert_eq!(job.options.lambda, None, "λ is chosen on validation");
    assert_eq!(job.baselines.mean, 2.0);
}
