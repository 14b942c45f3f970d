use crate::error::{OptimError, checked_finite};

pub(crate) fn finite_difference_gradient<F>(
    x: &[f64],
    lower: &[f64],
    upper: &[f64],
    ndeps: &[f64],
    mut objective: F,
) -> Result<Vec<f64>, OptimError>
where
    F: FnMut(&[f64]) -> Result<f64, OptimError>,
{
    let mut gradient = vec![0.0; x.len()];

    let mut candidate = x.to_vec();
    for index in 0..x.len() {
        let h = ndeps[index];
        let forward_room = if upper[index].is_finite() {
            upper[index] - x[index]
        } else {
            h
        };
        let backward_room = if lower[index].is_finite() {
            x[index] - lower[index]
        } else {
            h
        };

        let forward_step = h.min(forward_room);
        let backward_step = h.min(backward_room);

        let denominator = forward_step + backward_step;
        checked_finite(denominator, "finite-difference denominator", Some(index))?;
        if denominator > 0.0 {
            if x[index] + forward_step == x[index] && x[index] - backward_step == x[index] {
                return Err(OptimError::InvalidControl {
                    field: "ndeps",
                    reason: format!(
                        "stencil cannot perturb coordinate {index} at its current magnitude"
                    ),
                });
            }
            candidate[index] = checked_finite(
                x[index] + forward_step,
                "forward finite-difference coordinate",
                Some(index),
            )?;
            let f_plus = objective(&candidate)?;
            candidate[index] = checked_finite(
                x[index] - backward_step,
                "backward finite-difference coordinate",
                Some(index),
            )?;
            let f_minus = objective(&candidate)?;
            candidate[index] = x[index];
            gradient[index] = checked_finite(
                (f_plus - f_minus) / denominator,
                "finite-difference gradient",
                Some(index),
            )?;
        } else if lower[index] == upper[index] {
            gradient[index] = 0.0;
        } else {
            return Err(OptimError::InvalidGradient {
                index: Some(index),
                value: Some(denominator),
                reason: "finite-difference stencil has no positive span".to_owned(),
            });
        }
    }

    Ok(gradient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approximates_quadratic_gradient() {
        let gradient = finite_difference_gradient(
            &[3.0],
            &[f64::NEG_INFINITY],
            &[f64::INFINITY],
            &[1e-5],
            |x| Ok((x[0] - 2.0).powi(2)),
        )
        .unwrap();
        assert!((gradient[0] - 2.0).abs() < 1e-8);
    }

    #[test]
    fn uses_forward_difference_at_lower_bound() {
        let gradient = finite_difference_gradient(&[0.0], &[0.0], &[10.0], &[1e-5], |x| {
            Ok((x[0] - 2.0).powi(2))
        })
        .unwrap();
        assert!((gradient[0] + 4.0).abs() < 1e-4);
    }

    #[test]
    fn uses_asymmetric_stencil_near_upper_bound() {
        let gradient = finite_difference_gradient(&[0.99995], &[-1.0], &[1.0], &[1e-4], |x| {
            Ok((x[0] - 0.25).powi(2))
        })
        .unwrap();
        assert!((gradient[0] - 1.49985).abs() < 1e-12);
    }

    #[test]
    fn uses_asymmetric_stencil_near_lower_bound() {
        let gradient = finite_difference_gradient(&[-0.99995], &[-1.0], &[1.0], &[1e-4], |x| {
            Ok((x[0] + 0.25).powi(2))
        })
        .unwrap();
        assert!((gradient[0] + 1.49985).abs() < 1e-12);
    }

    #[test]
    fn fixed_parameter_has_zero_gradient() {
        let gradient = finite_difference_gradient(&[1.0], &[1.0], &[1.0], &[1e-5], |x| {
            Ok((x[0] - 2.0).powi(2))
        })
        .unwrap();
        assert_eq!(gradient, vec![0.0]);
    }

    #[test]
    fn repeats_base_value_for_each_one_sided_coordinate() {
        let mut calls = Vec::new();
        let gradient =
            finite_difference_gradient(&[0.0, 1.0], &[0.0, -1.0], &[2.0, 1.0], &[0.1, 0.1], |x| {
                calls.push(x.to_vec());
                Ok(x[0] + 2.0 * x[1])
            })
            .unwrap();

        assert!((gradient[0] - 1.0).abs() < 1e-12);
        assert!((gradient[1] - 2.0).abs() < 1e-12);
        assert_eq!(
            calls,
            vec![
                vec![0.1, 1.0],
                vec![0.0, 1.0],
                vec![0.0, 1.0],
                vec![0.0, 0.9],
            ]
        );
    }

    #[test]
    fn signed_bound_room_recovers_from_feasible_roundoff() {
        let x = f64::from_bits(0xc03e_0000_0000_0002);
        let mut calls = Vec::new();
        let gradient = finite_difference_gradient(&[x], &[-30.0], &[30.0], &[1e-3], |point| {
            calls.push(point[0]);
            Ok(point[0])
        })
        .unwrap();

        assert_eq!(calls[0].to_bits(), 0xc03d_ffbe_76c8_b43b);
        assert_eq!(calls[1].to_bits(), (-30.0_f64).to_bits());
        assert_eq!(gradient[0].to_bits(), 0x3ff0_0000_0000_1580);
    }
}
