//! Every scenario of umlx-tests on two software ConnectX adapters on a fresh in-process fabric
//! (one fabric and two devices per scenario, so the scenarios run in parallel). Each scenario
//! must pass here (none may skip), leave no device object behind and cause no IOMMU fault.

#![forbid(unsafe_code)]

use umlx_tests::{Env, Outcome, Result};

fn run(name: &str, scenario: fn(&mut Env) -> Result<Outcome>) {
    let mut env = Env::sim().unwrap_or_else(|e| panic!("{name}: opening two sims on a fabric: {e}"));
    let before = env.sim_snapshot().expect("Env::sim opens software ConnectX devices");
    match scenario(&mut env) {
        Ok(Outcome::Passed) => {}
        Ok(Outcome::Skipped(why)) => panic!("{name} skipped on the sim ({why}): every scenario must run on the sim"),
        Err(e) => panic!("{name} failed: {e}"),
    }
    let after = env.sim_snapshot().expect("Env::sim opens software ConnectX devices");
    assert_eq!(after.objects, before.objects, "{name} left device objects behind (A, B)");
    assert_eq!(after.iommu_faults, before.iommu_faults, "{name} caused IOMMU faults (A, B)");
}

macro_rules! sim_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), umlx_tests::scenarios::$name);
            }
        )*

        #[test]
        fn the_list_is_every_scenario() {
            let names: Vec<&str> = umlx_tests::scenarios::all().iter().map(|s| s.0).collect();
            assert_eq!(names, [$(stringify!($name)),*]);
        }
    };
}

umlx_tests::for_each_scenario!(sim_tests);
