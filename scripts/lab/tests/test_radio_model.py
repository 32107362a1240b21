"""The lab radio's ceilings against the published figures of the setups its profiles describe
(docs/throughput.md lists them with their sources), and the connection-event model against
its own ceiling. Run: python3 -m unittest discover -s scripts/lab/tests"""
import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guest"))
import radio_model as rm  # noqa: E402


def within(measured, published, tolerance=0.15):
    return abs(measured - published) <= tolerance * published


class PublishedFigures(unittest.TestCase):
    def test_nordic_2m_long_events(self):
        # Nordic's throughput sample: about 1.36 Mbps, 2M, 251-byte PDUs, events that fill a
        # long interval (the sample's default 400 ms); 244-byte notifications.
        rate = rm.notification_ceiling(rm.PHY_2M, 251, 400_000, None) * 8
        self.assertTrue(within(rate, 1.36e6), rate)

    def test_nordic_1m_long_events(self):
        # The same sample on 1M: "just under 800 kbps".
        rate = rm.notification_ceiling(rm.PHY_1M, 251, 400_000, None) * 8
        self.assertTrue(within(rate, 790e3), rate)
        self.assertLess(rate, 800e3)

    def test_linux_host_at_7_5_ms(self):
        # zephyr#20153: a Linux host with a controller on 2M, 251 B, 7.5 ms reached ~550 kbps:
        # two packets per event, the linux-default profile's controller.
        profile = rm.PROFILES["linux-default"]
        rate = rm.notification_ceiling(rm.PHY_2M, 251, 7_500, profile.packets_per_event) * 8
        self.assertTrue(within(rate, 550e3), rate)

    def test_raspberry_pi_pair(self):
        # bluer PR #173: two Raspberry Pi 4 moved 6.4-7.2 kB/s over an L2CAP channel (l2cat).
        # One packet per event; the kernel's 30-50 ms range: the figure lies inside the model's
        # span, and the middle of the range (37.5 ms) reproduces it within 15 %.
        profile = rm.PROFILES["rpi"]
        fast = rm.channel_ceiling(rm.PHY_1M, 251, 30_000, profile.packets_per_event)
        slow = rm.channel_ceiling(rm.PHY_1M, 251, 50_000, profile.packets_per_event)
        middle = rm.channel_ceiling(rm.PHY_1M, 251, 37_500, profile.packets_per_event)
        self.assertLess(slow, 6.4e3)
        self.assertGreater(fast, 7.2e3)
        self.assertTrue(within(middle, 6.8e3), middle)

    def test_bleak_twenty_byte_writes(self):
        # bleak writing 20-byte values without response: about 5 kB/s. Assumed setup (not
        # published with the figure): a 15 ms interval, 27-byte packets, 4 packets per event.
        rate = rm.ceiling_bytes_per_s(rm.PHY_1M, 27, 15_000, 4, pdu_bytes=27, payload_per_pdu=20)
        self.assertTrue(within(rate, 5e3), rate)

    def test_throughput_doc_table(self):
        # docs/throughput.md's upper bounds: one exchange per packet, as many as fit.
        self.assertEqual(rm.exchange_us(rm.PHY_1M, 27, rm.PHY_1M, 0), 676)
        self.assertEqual(rm.exchange_us(rm.PHY_2M, 27, rm.PHY_2M, 0), 496)
        self.assertEqual(rm.exchange_us(rm.PHY_1M, 251, rm.PHY_1M, 0), 2468)
        self.assertEqual(rm.exchange_us(rm.PHY_2M, 251, rm.PHY_2M, 0), 1392)


class Profiles(unittest.TestCase):
    def test_every_profile_names_its_sources(self):
        for name, profile in rm.PROFILES.items():
            self.assertEqual(profile.name, name)
            self.assertTrue(profile.sources, name)
            self.assertTrue(profile.summary, name)

    def test_linux_default_is_the_default(self):
        self.assertIn(rm.DEFAULT_PROFILE, rm.PROFILES)
        self.assertEqual(rm.DEFAULT_PROFILE, "linux-default")

    def test_slower_profiles_are_slower(self):
        c = {n: rm.profile_channel_ceiling(p) for n, p in rm.PROFILES.items() if p.timed}
        self.assertGreater(c["tuned"], c["linux-default"])
        self.assertGreater(c["linux-default"], c["rpi"])
        self.assertGreater(c["rpi"], c["far"])

    def test_best_link_of_linux_default_is_faster_than_untuned(self):
        profile = rm.PROFILES["linux-default"]
        untuned = rm.profile_channel_ceiling(profile)
        tuned = rm.profile_channel_ceiling(profile, rm.best_link(profile))
        self.assertGreater(tuned / untuned, 3)

    def test_best_link_is_what_the_tuned_request_gets(self):
        # The product asks for 7.5-15 ms; each profile's controller picks from that range.
        got = {n: rm.best_link(p).interval_units for n, p in rm.PROFILES.items() if p.timed}
        self.assertEqual(got, {"linux-default": 12, "tuned": 6, "rpi": 12, "far": 12})
        self.assertEqual(rm.best_link(rm.PROFILES["rpi"], (6, 6)).interval_units, 6)

    def test_interval_choice(self):
        self.assertEqual(rm.choose_interval(rm.PROFILES["linux-default"], 24, 40), 40)
        self.assertEqual(rm.choose_interval(rm.PROFILES["linux-default"], 6, 12), 12)
        self.assertEqual(rm.choose_interval(rm.PROFILES["rpi"], 6, 8), 8)
        self.assertEqual(rm.choose_interval(rm.PROFILES["tuned"], 24, 40), 6)
        # Below what the controller accepts: its own floor.
        self.assertEqual(rm.choose_interval(rm.PROFILES["linux-default"], 6, 8), 12)
        self.assertEqual(rm.choose_interval(rm.PROFILES["rpi"], 2, 3), 6)


class EventModel(unittest.TestCase):
    def test_flood_reaches_the_ceiling(self):
        for name in ("linux-default", "rpi", "far", "tuned"):
            profile = rm.PROFILES[name]
            for link in (rm.settled_link(profile), rm.best_link(profile)):
                ceiling = rm.profile_channel_ceiling(profile, link)
                measured = rm.simulate_flood(profile, link, 60, profile.acl_length,
                                             profile.acl_length - rm.L2CAP_HEADER)
                self.assertTrue(within(measured, ceiling, 0.05), (name, link, measured, ceiling))

    def test_a_reply_waits_for_a_later_event(self):
        # One packet each way per event: a request in event 1 is answered in event 2 at the
        # earliest, a round trip costs at least one interval.
        profile = rm.PROFILES["rpi"]
        link = rm.LinkModel(profile, rm.settled_link(profile))
        link.enqueue(rm.CENTRAL_TO_PERIPHERAL, rm.Outgoing(20, "request"))
        done, _ = link.run_event()
        self.assertEqual([d.item.token for d in done], ["request"])
        link.enqueue(rm.PERIPHERAL_TO_CENTRAL, rm.Outgoing(20, "reply"))
        done, _ = link.run_event()
        self.assertEqual([d.item.token for d in done], ["reply"])
        self.assertEqual(link.events, 2)

    def test_data_length_cuts_packets(self):
        profile = rm.PROFILES["far"]
        link = rm.LinkModel(rm.with_profile(profile, loss=0.0), rm.settled_link(profile))
        link.enqueue(rm.CENTRAL_TO_PERIPHERAL, rm.Outgoing(251, "pdu"))
        events = 0
        while link.busy():
            link.run_event()
            events += 1
        self.assertEqual(link.exchanges, 10)   # 9 x 27 + 8
        self.assertEqual(events, 3)            # 4 packets per event

    def test_loss_sends_again_and_nothing_twice(self):
        profile = rm.PROFILES["far"]
        link = rm.LinkModel(profile, rm.settled_link(profile), random.Random(7))
        tokens = list(range(50))
        for t in tokens:
            link.enqueue(rm.CENTRAL_TO_PERIPHERAL, rm.Outgoing(60, t))
        got = []
        while link.busy():
            done, _ = link.run_event()
            got += [d.item.token for d in done]
        self.assertEqual(got, tokens)
        self.assertGreater(link.lost, 0)

    def test_terminate_goes_after_queued_data(self):
        profile = rm.PROFILES["linux-default"]
        link = rm.LinkModel(profile, rm.settled_link(profile))
        for t in range(5):
            link.enqueue(rm.PERIPHERAL_TO_CENTRAL, rm.Outgoing(251, t))
        link.enqueue(rm.PERIPHERAL_TO_CENTRAL, rm.Outgoing(0, "bye", control=True))
        kinds = []
        while link.busy():
            done, _ = link.run_event()
            kinds += [(d.kind, d.item.token) for d in done]
        self.assertEqual(kinds[-1], ("terminated", "bye"))
        self.assertEqual([t for k, t in kinds if k == "delivered"], list(range(5)))

    def test_cut_hears_nothing(self):
        profile = rm.PROFILES["linux-default"]
        link = rm.LinkModel(profile, rm.settled_link(profile))
        link.cut = True
        link.enqueue(rm.CENTRAL_TO_PERIPHERAL, rm.Outgoing(10, 1))
        done, heard = link.run_event()
        self.assertEqual(done, [])
        self.assertFalse(heard)


class Discovery(unittest.TestCase):
    def test_continuous_scan_hears_within_one_interval_and_delay(self):
        rng = random.Random(3)
        for _ in range(200):
            d = rm.discovery_delay_us(rng, 100_000, 60_000, 60_000, 0, 0.0)
            self.assertLessEqual(d, 100_000)

    def test_duty_cycle_and_long_interval_average(self):
        rng = random.Random(5)
        delays = [rm.discovery_delay_us(rng, 1_280_000, 60_000, 30_000, 0, 0.0) for _ in range(400)]
        mean = sum(delays) / len(delays)
        # Half the events fall outside a 50 % window: about 0.64 s + 1.28 s x (1/2 + 1/4 ...).
        self.assertGreater(mean, 640_000)
        self.assertLess(mean, 2_600_000)


if __name__ == "__main__":
    unittest.main()
