import DBus
import Testing

@Suite struct ObjectPathTests {
    @Test func validPaths() {
        #expect(ObjectPath(rawValue: "/") != nil)
        #expect(ObjectPath(rawValue: "/org/bluez/hci0") != nil)
        #expect(ObjectPath(rawValue: "") == nil)
        #expect(ObjectPath(rawValue: "org") == nil)
        #expect(ObjectPath(rawValue: "/a/") == nil)
        #expect(ObjectPath(rawValue: "/a//b") == nil)
        #expect(ObjectPath(rawValue: "/a-b") == nil)
    }
}
