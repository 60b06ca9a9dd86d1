//! Firmware-initiated page traffic after INIT_HCA: PAGE_REQUEST events as objects raise and
//! lower the regular demand, `request_extra_pages`, and TAKE returning only the surplus.

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{EventType, PagesOpMod};

const PAGE_REQUEST_MASK: u64 = 1 << EventType::PAGE_REQUEST.0;

/// The page requests waiting on `eq`: the signed page counts, in order.
fn requests(eq: &mut HostEq) -> Vec<i32> {
    let v = eq
        .drain()
        .into_iter()
        .map(|e| {
            assert_eq!(eqe_type(&e), EventType::PAGE_REQUEST.0, "only page requests are subscribed");
            let req = page_request(&e);
            assert_eq!(req.ec_function.get(), 0, "ec_function");
            assert_eq!(req.func_id.get(), 0, "func_id");
            req.num_pages.get()
        })
        .collect();
    eq.doorbell(false);
    v
}

#[test]
fn objects_raise_and_lower_the_regular_demand() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let base = dev.page_accounting().held;
    assert_eq!(base, 288);
    let uar = host.alloc_uar().unwrap();
    let pd = host.alloc_pd().unwrap();
    let mut eq = host.create_eq(uar, 6, PAGE_REQUEST_MASK, 0).unwrap();
    // The EQ itself costs a page.
    assert_eq!(requests(&mut eq), [1]);
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), 1);
    host.give_pages(1).unwrap();
    assert_eq!(requests(&mut eq), [] as [i32; 0], "an answered request is not repeated");
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), 0);

    // CQs come in chunks of 64 (2 pages a chunk): the first CQ asks for 2, the 65th for 2 more.
    let mut cqs = Vec::new();
    for k in 0..65 {
        cqs.push(create_cq(&mut host, uar, eq.eqn, 0).unwrap());
        let r = requests(&mut eq);
        match k {
            0 | 64 => assert_eq!(r, [2], "CQ {k}"),
            _ => assert!(r.is_empty(), "CQ {k}: {r:?}"),
        }
    }
    // QPs come in chunks of 16 (4 pages a chunk).
    let mut qps = Vec::new();
    for k in 0..17 {
        qps.push(create_qp(&mut host, QpSpec::rc(pd, uar, cqs[0].cqn)).unwrap());
        let r = requests(&mut eq);
        match k {
            0 | 16 => assert_eq!(r, [4], "QP {k}"),
            _ => assert!(r.is_empty(), "QP {k}: {r:?}"),
        }
    }
    let acc = dev.page_accounting();
    assert_eq!(acc.demand, base + 1 + 4 + 8);
    assert_eq!(acc.held, base + 1);
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), 12);
    // Answer with one GIVE: no further requests.
    host.give_pages(12).unwrap();
    assert!(requests(&mut eq).is_empty());
    assert_eq!(dev.page_accounting().held, base + 13);
    // Nothing is surplus while the objects exist.
    assert!(host.take_pages(50).unwrap().is_empty());

    // Destroying the 17th QP drops a QP chunk: a negative request.
    destroy_qp(&mut host, qps.pop().unwrap().qpn).unwrap();
    assert_eq!(requests(&mut eq), [-4]);
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), -4);
    // TAKE asks for more than the surplus and gets exactly the surplus.
    let back = host.take_pages(10).unwrap();
    assert_eq!(back.len(), 4);
    assert!(requests(&mut eq).is_empty(), "the negative request was answered");
    assert!(host.take_pages(10).unwrap().is_empty());
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.demand, acc.returned_total), (base + 9, base + 9, 4));
}

#[test]
fn request_extra_pages() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let uar = host.alloc_uar().unwrap();
    let mut eq = host.create_eq(uar, 4, PAGE_REQUEST_MASK, 0).unwrap();
    assert_eq!(requests(&mut eq), [1]);
    host.give_pages(1).unwrap();
    let held = dev.page_accounting().held;

    dev.request_extra_pages(40);
    assert_eq!(requests(&mut eq), [40]);
    assert_eq!(dev.page_accounting().demand, held + 40);
    host.give_pages(40).unwrap();
    assert!(requests(&mut eq).is_empty());
    // Giving the extra demand back: the firmware asks for the pages back.
    dev.request_extra_pages(0);
    assert_eq!(requests(&mut eq), [-40]);
    let back = host.take_pages(64).unwrap();
    assert_eq!(back.len(), 40);
    assert!(requests(&mut eq).is_empty());
    assert_eq!(dev.page_accounting().held, held);

    // A request the driver cannot meet: CANT_GIVE forgets it, the next change asks afresh.
    dev.request_extra_pages(8);
    assert_eq!(requests(&mut eq), [8]);
    host.exec(
        umlx_hwdesc::enums::CmdOpcode::MANAGE_PAGES,
        0,
        umlx_hwdesc::ifc::manage_pages_in::SIZE_BYTES,
        16,
        |_| {},
    )
    .unwrap();
    dev.request_extra_pages(9);
    assert_eq!(requests(&mut eq), [9], "after CANT_GIVE the whole shortfall is asked again");
}

#[test]
fn no_page_request_without_a_subscribed_eq() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let uar = host.alloc_uar().unwrap();
    let mut eq = host.create_eq(uar, 4, 1 << EventType::CMD.0, 0).unwrap(); // commands only
    eq.drain();
    eq.doorbell(false);
    dev.request_extra_pages(5);
    assert!(eq.drain().iter().all(|e| eqe_type(e) == EventType::CMD.0));
    // The demand is still visible to QUERY_PAGES.
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), 6);
}

#[test]
fn reclaim_after_teardown_may_answer_empty_before_returning_pages() {
    let dev = SimDevice::new(SimConfig {
        hostile: umlx_sim::Hostile { reclaim_empty_replies: 2, ..Default::default() },
        ..Default::default()
    });
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let held = dev.page_accounting().held as usize;
    assert!(held > 0);
    host.teardown_hca(umlx_hwdesc::enums::TeardownProfile::GRACEFUL_CLOSE).unwrap();
    assert!(host.take_pages(64).unwrap().is_empty(), "first TAKE after teardown: none yet");
    assert!(host.take_pages(64).unwrap().is_empty(), "second TAKE: none yet");
    let mut back = 0;
    while back < held {
        let n = host.take_pages(768).unwrap().len();
        assert!(n > 0, "pages come back once the firmware released them");
        back += n;
    }
    assert_eq!(dev.page_accounting().held, 0);
}
