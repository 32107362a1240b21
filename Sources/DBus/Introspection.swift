enum Introspection {
    static let header = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">

        """

    static let peer = DBusInterface(
        name: StandardInterface.peer,
        methods: [
            DBusMethod(name: "Ping") { _ in [] },
            DBusMethod(name: "GetMachineId", out: "s") { _ in [] },
        ])
    static let introspectable = DBusInterface(
        name: StandardInterface.introspectable,
        methods: [DBusMethod(name: "Introspect", out: "s") { _ in [] }])
    static let properties = DBusInterface(
        name: StandardInterface.properties,
        methods: [
            DBusMethod(name: "Get", in: "ss", out: "v") { _ in [] },
            DBusMethod(name: "GetAll", in: "s", out: "a{sv}") { _ in [] },
            DBusMethod(name: "Set", in: "ssv") { _ in [] },
        ],
        signals: [DBusSignalDescription(name: "PropertiesChanged", signature: "sa{sv}as")])
    static let objectManager = DBusInterface(
        name: StandardInterface.objectManager,
        methods: [DBusMethod(name: "GetManagedObjects", out: "a{oa{sa{sv}}}") { _ in [] }],
        signals: [
            DBusSignalDescription(name: "InterfacesAdded", signature: "oa{sa{sv}}"),
            DBusSignalDescription(name: "InterfacesRemoved", signature: "oas"),
        ])

    /// XML for one node: its interfaces (standard ones first) and its children's names.
    static func xml(interfaces: [DBusInterface], isObject: Bool, isObjectManager: Bool, children: [String]) -> String {
        var xml = header + "<node>\n"
        var all = [introspectable, peer]
        if isObject { all.append(properties) }
        if isObjectManager { all.append(objectManager) }
        all += interfaces
        for interface in all {
            xml += "  <interface name=\"\(escape(interface.name))\">\n"
            for method in interface.methods {
                xml += "    <method name=\"\(escape(method.name))\">\n"
                for (signature, direction) in [(method.inSignature, "in"), (method.outSignature, "out")] {
                    for type in signature.completeTypes {
                        xml += "      <arg type=\"\(escape(type.rawValue))\" direction=\"\(direction)\"/>\n"
                    }
                }
                xml += "    </method>\n"
            }
            for signal in interface.signals {
                xml += "    <signal name=\"\(escape(signal.name))\">\n"
                for type in signal.signature.completeTypes {
                    xml += "      <arg type=\"\(escape(type.rawValue))\"/>\n"
                }
                xml += "    </signal>\n"
            }
            for property in interface.properties {
                xml += "    <property name=\"\(escape(property.name))\" type=\"\(escape(property.signature.rawValue))\""
                xml += " access=\"\(property.access.rawValue)\"/>\n"
            }
            xml += "  </interface>\n"
        }
        for child in children {
            xml += "  <node name=\"\(escape(child))\"/>\n"
        }
        xml += "</node>\n"
        return xml
    }

    private static let entities: [Character: String] = ["&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"]

    private static func escape(_ text: String) -> String { text.map { entities[$0] ?? String($0) }.joined() }
}

enum StandardInterface {
    static let peer = "org.freedesktop.DBus.Peer"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let properties = "org.freedesktop.DBus.Properties"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let all: Set<String> = [peer, introspectable, properties, objectManager]
}
