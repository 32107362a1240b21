import CDBus
import Synchronization

/// The objects we export and the code that answers method calls to them. Calls arrive on the reactor thread; each is
/// answered by a task, so a handler may await anything (our own outgoing calls too) while the loop goes on serving.
/// Standard interfaces (Introspectable, Peer, Properties, ObjectManager) are served here from the descriptions.
final class ExportRegistry: Sendable {
    private struct State {
        var objects: [ObjectPath: [DBusInterface]] = [:]
        var managers: Set<ObjectPath> = []
    }

    private let state = Mutex(State())
    private let emitter = OrderedEmitter()
    private let loop: EventLoop
    /// See `DBusConnection.restrictMethodCalls`.
    let callerPolicy = Mutex<CallerPolicy?>(nil)

    /// Who may call our exported methods: only the current unique-name owner of `name`.
    struct CallerPolicy: Sendable {
        var name: String
        var onRefusal: @Sendable (_ sender: String, _ call: String) -> Void
        /// Callers already reported (bounded: a flood of new connections is reported up to it).
        var reported: Set<String> = []
    }

    /// Whether `message` may be served, given the signal router's owner lookup (loop thread); when not, replies
    /// AccessDenied and reports the caller.
    private func admits(_ message: Message, interface: String?, member: String, ownerOf: (String) -> String?) -> Bool {
        guard interface != StandardInterface.peer else { return true }
        let verdict: (name: String, report: (@Sendable (String, String) -> Void)?)? = callerPolicy.withLock { policy in
            guard let current = policy else { return nil }
            let sender = message.sender
            if let owner = ownerOf(current.name), sender == owner { return nil }
            var report: (@Sendable (String, String) -> Void)?
            if !current.reported.contains(sender), current.reported.count < 256 {
                policy?.reported.insert(sender)
                report = current.onRefusal
            }
            return (current.name, report)
        }
        guard let verdict else { return true }
        verdict.report?(message.sender, "\(interface ?? "?").\(member)")
        reply(message, error: DBusError(
            name: DBusError.accessDeniedName,
            message: "only the owner of \(verdict.name) may call this object"))
        return false
    }

    init(loop: EventLoop) {
        self.loop = loop
    }

    func close() { emitter.finish() }

    // MARK: Registration

    func export(_ interfaces: [DBusInterface], at path: ObjectPath) throws {
        try validate(interfaces)
        let (previous, manager) = state.withLock { state in
            let previous = state.objects.updateValue(interfaces, forKey: path)
            return (previous, nearestManager(above: path, in: state.managers))
        }
        guard let manager else { return }
        let removed = (previous ?? []).map(\.name).filter { name in !interfaces.contains { $0.name == name } }
        emitter.submit { [loop] in
            if !removed.isEmpty {
                ExportRegistry.sendInterfacesRemoved(path: path, names: removed, manager: manager, loop: loop)
            }
            guard !interfaces.isEmpty else { return }
            let properties = await ExportRegistry.readProperties(of: interfaces)
            if let message = try? Message.signal(
                path: manager, interface: StandardInterface.objectManager, member: "InterfacesAdded",
                arguments: [.objectPath(path), .interfacesAndProperties(properties)]) {
                loop.send(message)
            }
        }
    }

    func unexport(_ path: ObjectPath) {
        let (previous, manager) = state.withLock { state in
            (state.objects.removeValue(forKey: path), nearestManager(above: path, in: state.managers))
        }
        guard let previous, let manager, !previous.isEmpty else { return }
        let names = previous.map(\.name)
        emitter.submit { [loop] in
            ExportRegistry.sendInterfacesRemoved(path: path, names: names, manager: manager, loop: loop)
        }
    }

    func addObjectManager(at root: ObjectPath) { state.withLock { _ = $0.managers.insert(root) } }

    private static func sendInterfacesRemoved(path: ObjectPath, names: [String], manager: ObjectPath, loop: EventLoop) {
        guard let message = try? Message.signal(
            path: manager, interface: StandardInterface.objectManager, member: "InterfacesRemoved",
            arguments: [.objectPath(path), .strings(names)])
        else { return }
        loop.send(message)
    }

    private func nearestManager(above path: ObjectPath, in managers: Set<ObjectPath>) -> ObjectPath? {
        var candidate = path.parent
        while let current = candidate {
            if managers.contains(current) { return current }
            candidate = current.parent
        }
        return nil
    }

    private func validate(_ interfaces: [DBusInterface]) throws {
        var seen: Set<String> = []
        for interface in interfaces {
            try Names.checkInterface(interface.name)
            guard !StandardInterface.all.contains(interface.name) else {
                throw DBusError.invalidArgs("\(interface.name) is provided by the connection itself")
            }
            guard seen.insert(interface.name).inserted else {
                throw DBusError.invalidArgs("interface \(interface.name) is given twice")
            }
            for method in interface.methods { try Names.checkMember(method.name) }
            for signal in interface.signals { try Names.checkMember(signal.name) }
            for property in interface.properties {
                try Names.checkMember(property.name)
                guard property.signature.isSingleCompleteType else {
                    throw DBusError.invalidArgs(
                        "property \(property.name) has type \"\(property.signature)\", not a single complete type")
                }
            }
        }
    }

    // MARK: Serving calls (entered on the loop thread)

    func handleMethodCall(_ message: Message, ownerOf: (String) -> String? = { _ in nil }) {
        guard let path = message.path, let member = message.member else { return }
        let interface = message.interface
        guard admits(message, interface: interface, member: member, ownerOf: ownerOf) else { return }
        let (interfaces, isManager, children) = state.withLock { state in
            (state.objects[path], state.managers.contains(path), childNames(of: path, in: state))
        }
        let isObject = interfaces != nil
        let exported = interfaces ?? []

        switch interface {
        case StandardInterface.peer?:
            servePeer(message, member: member)
        case StandardInterface.introspectable?:
            guard member == "Introspect" else { return replyUnknownMethod(message, interface, member) }
            guard isObject || isManager || !children.isEmpty || path == .root else {
                return reply(message, error: unknownObject(path))
            }
            guard message.signatureString.isEmpty else { return reply(message, error: wrongSignature("", message)) }
            let xml = Introspection.xml(
                interfaces: exported, isObject: isObject, isObjectManager: isManager, children: children)
            respond(to: message, out: "s") { [.string(xml)] }
        case StandardInterface.properties?:
            guard isObject else { return reply(message, error: unknownObject(path)) }
            serveProperties(message, member: member, interfaces: exported)
        case StandardInterface.objectManager?:
            guard isManager, member == "GetManagedObjects" else {
                return isManager || isObject
                    ? replyUnknownMethod(message, interface, member) : reply(message, error: unknownObject(path))
            }
            guard message.signatureString.isEmpty else { return reply(message, error: wrongSignature("", message)) }
            let objects = state.withLock { state in
                state.objects.filter { $0.key.isDescendant(of: path) }
            }
            respond(to: message, out: "a{oa{sa{sv}}}") {
                var managed: ManagedObjects = [:]
                for (objectPath, interfaces) in objects {
                    managed[objectPath] = await ExportRegistry.readProperties(of: interfaces)
                }
                return [.managedObjects(managed)]
            }
        default:
            guard isObject else { return reply(message, error: unknownObject(path)) }
            let candidates = interface.map { name in exported.filter { $0.name == name } } ?? exported
            if let interface, candidates.isEmpty {
                return reply(message, error: Self.noInterface(interface, at: path))
            }
            guard let method = candidates.lazy.compactMap({ $0.methods.first { $0.name == member } }).first else {
                return replyUnknownMethod(message, interface, member)
            }
            guard message.signatureString == method.inSignature.rawValue else {
                return reply(message, error: wrongSignature(method.inSignature.rawValue, message))
            }
            let sender = message.sender
            let interfaceName = interface ?? candidates.first { $0.methods.contains { $0.name == member } }!.name
            let makeCall = { @Sendable () throws -> DBusMethodCall in
                DBusMethodCall(sender: sender, path: path, interface: interfaceName, member: member,
                               arguments: try message.arguments())
            }
            switch method.body {
            case .handler(let handler):
                respond(to: message, out: method.outSignature) { try await handler(makeCall()) }
            case .immediate(let take):
                do {
                    take(try makeCall(), pendingReply(to: message, out: method.outSignature))
                } catch {
                    reply(message, error: Self.dbusError(error))
                }
            }
        }
    }

    private func servePeer(_ message: Message, member: String) {
        switch member {
        case "Ping":
            respond(to: message, out: "") { [] }
        case "GetMachineId":
            var error = CDBus.DBusError()
            dbus_error_init(&error)
            if let id = dbus_try_get_local_machine_id(&error) {
                let text = String(cString: id)
                dbus_free(id)
                respond(to: message, out: "s") { [.string(text)] }
            } else {
                reply(message, error: DBusError(taking: &error, fallback: "no machine id"))
            }
        default:
            replyUnknownMethod(message, StandardInterface.peer, member)
        }
    }

    private func serveProperties(_ message: Message, member: String, interfaces: [DBusInterface]) {
        let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"][member]
        guard let expected else { return replyUnknownMethod(message, StandardInterface.properties, member) }
        guard message.signatureString == expected else {
            return reply(message, error: wrongSignature(expected, message))
        }
        let path = message.path!
        switch member {
        case "GetAll":
            respond(to: message, out: "a{sv}") {
                let arguments = try message.arguments()
                let name = arguments[0].string!
                guard let interface = interfaces.first(where: { $0.name == name }) else {
                    if StandardInterface.all.contains(name) { return [.vardict([:])] }
                    throw ExportRegistry.noInterface(name, at: path)
                }
                return [.vardict(await ExportRegistry.readProperties(of: interface))]
            }
        case "Get":
            respond(to: message, out: "v") {
                let arguments = try message.arguments()
                let property = try ExportRegistry.property(
                    arguments[0].string!, arguments[1].string!, in: interfaces, path: path)
                guard property.access.isReadable else {
                    throw DBusError(name: DBusError.accessDeniedName, message: "property \(property.name) is write-only")
                }
                let value = try await property.get()
                guard value.signatureString == property.signature.rawValue else {
                    throw DBusError.failed(
                        "property \(property.name) produced a value of type \(value.signatureString), not \(property.signature)")
                }
                return [.variant(value)]
            }
        default:  // Set
            respond(to: message, out: "") {
                let arguments = try message.arguments()
                let property = try ExportRegistry.property(
                    arguments[0].string!, arguments[1].string!, in: interfaces, path: path)
                guard property.access.isWritable, let set = property.set else {
                    throw DBusError(name: DBusError.propertyReadOnlyName, message: "property \(property.name) is read-only")
                }
                let value = arguments[2].lookingThroughVariant
                guard value.signatureString == property.signature.rawValue else {
                    throw DBusError.invalidArgs(
                        "property \(property.name) has type \(property.signature), not \(value.signatureString)")
                }
                try await set(value)
                return []
            }
        }
    }

    private static func property(_ interfaceName: String, _ name: String, in interfaces: [DBusInterface], path: ObjectPath)
        throws -> DBusProperty
    {
        guard let interface = interfaces.first(where: { $0.name == interfaceName }) else {
            throw noInterface(interfaceName, at: path)
        }
        guard let property = interface.properties.first(where: { $0.name == name }) else {
            throw DBusError(name: DBusError.unknownPropertyName, message: "interface \(interfaceName) has no property \(name)")
        }
        return property
    }

    /// All readable properties of the interfaces; one whose getter fails, or returns the wrong type, is left out rather
    /// than failing the whole answer.
    static func readProperties(of interfaces: [DBusInterface]) async -> [String: [String: DBusValue]] {
        var result: [String: [String: DBusValue]] = [:]
        for interface in interfaces {
            result[interface.name] = await readProperties(of: interface)
        }
        return result
    }

    static func readProperties(of interface: DBusInterface) async -> [String: DBusValue] {
        var values: [String: DBusValue] = [:]
        for property in interface.properties where property.access.isReadable {
            if let value = try? await property.get(), value.signatureString == property.signature.rawValue {
                values[property.name] = value
            }
        }
        return values
    }

    private func childNames(of path: ObjectPath, in state: State) -> [String] {
        var names: Set<String> = []
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        for candidate in Array(state.objects.keys) + Array(state.managers) where candidate.isDescendant(of: path) {
            let rest = candidate.rawValue.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    // MARK: Replies

    /// Answers `message` from a task: the arguments `work` returns, checked against `out`, or the error it throws (a
    /// DBusError as is, anything else as Failed).
    private func respond(
        to message: Message, out: Signature, _ work: @escaping @Sendable () async throws -> [DBusValue]
    ) {
        let reply = pendingReply(to: message, out: out)
        // Unstructured: the reactor thread must return at once (bluetoothd may call us while our own call waits for its reply).
        Task {
            do {
                reply.succeed(try await work())
            } catch {
                reply.fail(Self.dbusError(error))
            }
        }
    }

    private func pendingReply(to message: Message, out: Signature) -> DBusPendingReply {
        let loop = self.loop
        return DBusPendingReply { result in
            guard !message.noReplyExpected else { return }
            let reply: Message
            do {
                reply = try Self.returnMessage(to: message, out: out, values: result.get())
            } catch {
                reply = message.makeError(Self.dbusError(error))
            }
            loop.send(reply)
        }
    }

    /// A DBusError as is, anything else as Failed.
    private static func dbusError(_ error: any Error) -> DBusError {
        error as? DBusError ?? DBusError.failed(String(describing: error))
    }

    /// The method return carrying `values`, which must match the method's out signature.
    private static func returnMessage(to message: Message, out: Signature, values: [DBusValue]) throws -> Message {
        let signature = values.map(\.signatureString).joined()
        guard signature == out.rawValue else {
            throw DBusError.failed("the handler returned \"\(signature)\" where \"\(out)\" was declared")
        }
        let reply = message.makeReturn()
        try reply.append(values)
        return reply
    }

    private func reply(_ message: Message, error: DBusError) {
        if !message.noReplyExpected { loop.send(message.makeError(error)) }
    }

    private func replyUnknownMethod(_ message: Message, _ interface: String?, _ member: String) {
        reply(message, error: DBusError(
            name: DBusError.unknownMethodName,
            message: "no method \(member) with signature \"\(message.signatureString)\""
                + (interface.map { " on interface \($0)" } ?? "")))
    }

    private static func noInterface(_ name: String, at path: ObjectPath) -> DBusError {
        DBusError(name: DBusError.unknownInterfaceName, message: "object \(path) has no interface \(name)")
    }

    private func unknownObject(_ path: ObjectPath) -> DBusError {
        DBusError(name: DBusError.unknownObjectName, message: "no object at \(path)")
    }

    private func wrongSignature(_ expected: String, _ message: Message) -> DBusError {
        DBusError.invalidArgs("expected arguments \"\(expected)\", got \"\(message.signatureString)\"")
    }
}
