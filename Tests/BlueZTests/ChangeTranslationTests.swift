import Testing
@testable import BlueZ

/// The translation behind `BluetoothSession.stream(startingWith:)`, fed by hand: the pump's
/// deliveries and the session's end, in the orders they can race in with the first elements.
@Suite struct ChangeTranslationTests {
    /// Numbers each change from the state it starts with; `serviceVanished` ends the stream.
    static func counting(into continuation: AsyncStream<String>.Continuation) -> ChangeTranslation<Int, String> {
        ChangeTranslation(continuation: continuation) { count, change in
            guard change != .serviceVanished else { return nil }
            count += 1
            return ["change \(count)"]
        }
    }

    static func collect(_ stream: AsyncStream<String>) async -> [String] {
        var seen: [String] = []
        for await element in stream { seen.append(element) }
        return seen
    }

    @Test func changesDeliveredBeforeTheFirstElementsFollowThemInOrder() async {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        let translation = Self.counting(into: continuation)
        translation.deliver(.serviceAppeared)
        translation.deliver(.accessDenied("refused"))
        translation.begin(10, initial: ["initial"])
        translation.deliver(.serviceAppeared)
        translation.sourceEnded()
        #expect(await Self.collect(stream) == ["initial", "change 11", "change 12", "change 13"])
    }

    @Test func aSessionEndedBeforeTheFirstElementsStillYieldsThemAndWhatCameBefore() async {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        let translation = Self.counting(into: continuation)
        translation.deliver(.serviceAppeared)
        translation.sourceEnded()
        translation.begin(0, initial: ["initial"])
        #expect(await Self.collect(stream) == ["initial", "change 1"])
    }

    @Test func aChangeTranslatedToNilEndsTheStreamAndLaterOnesAreDropped() async {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        let translation = Self.counting(into: continuation)
        translation.begin(0, initial: [])
        translation.deliver(.serviceAppeared)
        translation.deliver(.serviceVanished)
        translation.deliver(.serviceAppeared)
        #expect(await Self.collect(stream) == ["change 1"])
    }
}
