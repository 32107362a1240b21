#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import DaemonSupport
import Foundation
import Machines
import ServiceLifecycle
import Synchronization

/// Runs beside a role (the command's or the daemon's service group): asks the adapter for the
/// fastest link the process may ask for, reports the link under each connection as a
/// `RoleEvent.link`, keeps a record of it for `bletransfer status`, steps a tuned link back
/// once when it carries far less than it did, and at the end puts back what it changed.
///
/// What a process may do depends on its privileges: with CAP_NET_ADMIN it sets the adapter's
/// defaults (`AdapterTuning`), with CAP_NET_RAW it watches the controller's link events and may
/// send per-connection commands (`HCILinkWatch`); without them it reports what the kernel lists
/// (the connection, its peer) and says once what it could not set and the command that would.
package struct LinkWatchService: Service {
    /// The adapter of the role (nil: the lowest present).
    package let adapterName: String?
    /// Ask for the fast link (`--no-tune` turns it off).
    package let tune: Bool
    /// Restore the adapter's defaults at the end: a command does; the daemon (ExecStartPre tuned it for good) does not.
    package let restoreOnExit: Bool
    package let emit: @Sendable (RoleEvent) -> Void
    /// Progress the role reported: the fallback's input.
    let progress: LinkProgressFeed

    package init(adapterName: String?, tune: Bool, restoreOnExit: Bool, progress: LinkProgressFeed,
                emit: @escaping @Sendable (RoleEvent) -> Void) {
        self.adapterName = adapterName
        self.tune = tune
        self.restoreOnExit = restoreOnExit
        self.progress = progress
        self.emit = emit
    }

    package func run() async {
        guard let controller = Self.controller(named: adapterName) else { return }
        var tuning: AdapterTuningOutcome?
        if tune {
            let outcome = await AdapterTuning.apply(.tuned, controller: controller.index, remember: restoreOnExit)
            tuning = outcome
            if !outcome.refusals.isEmpty { emit(.warning(outcome.summary)) }
        }
        let tuned = await Self.adapterIsTuned(controller.index)
        let record = LinkRecord(adapter: controller.name, tuned: tuned)
        let context = WatchContext(tuning: tuning, tuned: tuned, record: record, emit: emit, progress: progress)
        // Until the graceful shutdown begins, which cancels it.
        _ = await cancelWhenGracefulShutdown {
            do throws(HCILinkWatchError) {
                let watch = try HCILinkWatch.open(controller: controller.index)
                await context.watch(watch)
            } catch { await context.poll(controller: controller.index, reason: error) }
        }
        record.remove()
        if let tuning, restoreOnExit { await AdapterTuning.restore(tuning, controller: controller.index) }
    }

    static func controller(named name: String?) -> (index: UInt16, name: String)? {
        let controllers = KernelBluetooth.report().controllers
        let chosen = name.flatMap { n in controllers.first { $0.name == n } } ?? controllers.min { $0.id < $1.id }
        return chosen.map { (UInt16($0.id), $0.name) }
    }

    static func adapterIsTuned(_ index: UInt16) async -> Bool {
        guard let configuration = try? await AdapterLinkDefaults.systemConfiguration(controller: index) else { return false }
        return AdapterLinkTarget.tuned.isMet(by: configuration)
    }
}

/// What a role reported of its progress, for the link's fallback: bytes so far, and a new
/// transfer's start. The role's event stream is forwarded into it where the events are rendered.
package final class LinkProgressFeed: Sendable {
    private let latest = Mutex<(bytes: Int, at: ContinuousClock.Instant, generation: Int)?>(nil)
    private let origin = ContinuousClock.now

    package init() {}

    package func observe(_ event: RoleEvent) {
        guard case .progress(_, let progress, _, _) = event else { return }
        latest.withLock { current in
            let generation = (current?.generation ?? 0) + (progress.bytesSoFar < (current?.bytes ?? 0) ? 1 : 0)
            current = (progress.bytesSoFar, ContinuousClock.now, generation)
        }
    }

    /// The newest sample: bytes, when (since this feed began), and which transfer.
    func sample() -> (bytes: Int, at: Duration, generation: Int)? {
        latest.withLock { $0.map { ($0.bytes, $0.at - origin, $0.generation) } }
    }
}

/// The link watch's state, on one task.
private struct WatchContext: Sendable {
    let tuning: AdapterTuningOutcome?
    let tuned: Bool
    let record: LinkRecord
    let emit: @Sendable (RoleEvent) -> Void
    let progress: LinkProgressFeed

    func report(_ link: LinkParameters) -> LinkReport {
        LinkReport(peer: link.peer, phy: link.transmitPHY?.description, intervalMilliseconds: link.intervalMilliseconds,
                   latency: link.latency.map(Int.init), supervisionTimeoutMilliseconds: link.supervisionTimeoutMilliseconds,
                   dataLength: link.transmitOctets.map(Int.init), tuned: tuned,
                   limits: LinkJudgement.limits(of: link, tuning: tuning).map {
                       LinkReport.Limit(setting: $0.setting, by: $0.limit.rawValue, detail: $0.detail)
                   })
    }

    /// With CAP_NET_RAW: each change of a link's parameters, as the controller reports it; the fallback, per second.
    func watch(_ watch: HCILinkWatch) async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                await watch.run(changed: { [self] link in
                    record.update(link)
                    emit(.link(report(link)))
                }, gone: { [self] handle in record.forget(handle) })
            }
            group.addTask { [self] in await fallBackWhenNeeded(watch) }
        }
        watch.close()
    }

    private func fallBackWhenNeeded(_ watch: HCILinkWatch) async {
        var fallback = LinkFallback()
        var generation = 0
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            guard let sample = progress.sample(), let link = record.current() else { continue }
            if sample.generation != generation { generation = sample.generation; fallback.transferStarted() }
            guard tuning != nil, link.transmitPHY == .le2M || (link.intervalUnits ?? 40) < 24,
                  let rates = fallback.record(bytes: sample.bytes, at: sample.at) else { continue }
            try? watch.send(.setPHY(handle: link.handle, phy: .le1M))
            if link.isCentral == true {
                try? watch.send(.updateConnection(handle: link.handle, minInterval: 24, maxInterval: 40,
                                                  latency: 0, timeout: link.supervisionTimeoutUnits ?? 42))
            }
            emit(.warning("link to \(link.peer ?? "the peer"): the rate fell to \(Self.rate(rates.now)) from "
                          + "\(Self.rate(rates.best)); stepping back to 1M" + (link.isCentral == true ? " and a 30–50 ms interval" : "")))
        }
    }

    static func rate(_ bytesPerSecond: Double) -> String { String(format: "%.1f kB/s", bytesPerSecond / 1000) }

    /// Without CAP_NET_RAW: the kernel's LE connections, each second; a new one reported with what this process knows.
    func poll(controller index: UInt16, reason: HCILinkWatchError) async {
        let unreadable = reason == .notPermitted
            ? "reading the link's PHY, interval and packet size needs CAP_NET_RAW (run as root to see them)"
            : "the link's events cannot be read (\(reason))"
        var known: Set<UInt16> = []
        while !Task.isCancelled {
            let connections = KernelBluetooth.leConnections(controller: index) ?? []
            for connection in connections where !known.contains(connection.handle) {
                var link = LinkParameters(handle: connection.handle)
                link.peer = connection.peer
                link.isCentral = connection.outgoing
                record.update(link)
                var report = self.report(link)
                report.unreadable = unreadable
                emit(.link(report))
            }
            let handles = Set(connections.map(\.handle))
            for gone in known.subtracting(handles) { record.forget(gone) }
            known = handles
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

/// This process's links, kept in a file of the runtime directory for `bletransfer status`: `$RUNTIME_DIRECTORY` (the
/// service's, /run/bletransfer), else `$XDG_RUNTIME_DIR/bletransfer`, else /tmp/bletransfer-UID; one file a process,
/// `links-PID.json`, written whole each time (a temporary file renamed over it) and removed at the end.
package final class LinkRecord: Sendable {
    private let path: String
    private let state: Mutex<(adapter: String, tuned: Bool, links: [UInt16: LinkParameters])>

    init(adapter: String, tuned: Bool) {
        path = LinkRecords.ownDirectory() + "/links-\(getpid()).json"
        state = Mutex((adapter, tuned, [:]))
        write()
    }

    func update(_ link: LinkParameters) {
        state.withLock { $0.links[link.handle] = link }
        write()
    }

    func forget(_ handle: UInt16) {
        state.withLock { _ = $0.links.removeValue(forKey: handle) }
        write()
    }

    /// The link with the most recent connection (the one a role transfers on).
    func current() -> LinkParameters? { state.withLock { $0.links.values.max { $0.handle < $1.handle } } }

    func remove() { _ = unlink(path) }

    private func write() {
        let entry = state.withLock { state in
            LinkRecords.Entry(pid: Int(getpid()), adapter: state.adapter, tuned: state.tuned,
                              links: state.links.values.sorted { $0.handle < $1.handle }.map(LinkRecords.Link.init))
        }
        guard let data = try? JSONEncoder().encode(entry) else { return }
        let directory = (path as NSString).deletingLastPathComponent
        _ = mkdir(directory, 0o755)
        let temporary = path + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o644]) else {
            return
        }
        _ = rename(temporary, path)
    }
}

/// The link records every bletransfer process on this host keeps (`LinkRecord`), as `status` reads them.
package enum LinkRecords {
    package struct Link: Codable, Sendable, Equatable {
        package var handle: Int
        package var peer: String?
        package var central: Bool?
        package var phy: String?
        package var intervalMs: Double?
        package var latency: Int?
        package var supervisionTimeoutMs: Int?
        package var dataLength: Int?

        init(_ link: LinkParameters) {
            handle = Int(link.handle)
            peer = link.peer
            central = link.isCentral
            phy = link.transmitPHY?.description
            intervalMs = link.intervalMilliseconds
            latency = link.latency.map(Int.init)
            supervisionTimeoutMs = link.supervisionTimeoutMilliseconds
            dataLength = link.transmitOctets.map(Int.init)
        }

        /// "2M · 15 ms · 251 B, latency 0, timeout 420 ms", or why nothing is known.
        package var text: String {
            var parts: [String] = []
            if let phy { parts.append(phy) }
            if let intervalMs { parts.append(LinkParameters.trimmed(intervalMs) + " ms") }
            if let dataLength { parts.append("\(dataLength) B") }
            guard !parts.isEmpty else { return "parameters not readable by this process (needs CAP_NET_RAW)" }
            var text = parts.joined(separator: " · ")
            if let latency { text += ", latency \(latency)" }
            if let supervisionTimeoutMs { text += ", supervision timeout \(supervisionTimeoutMs) ms" }
            return text
        }
    }

    package struct Entry: Codable, Sendable, Equatable {
        package var pid: Int
        package var adapter: String
        package var tuned: Bool
        package var links: [Link]
    }

    static func ownDirectory() -> String {
        let environment = ProcessInfo.processInfo.environment
        if let runtime = environment["RUNTIME_DIRECTORY"], !runtime.isEmpty {
            return runtime.split(separator: ":").first.map(String.init) ?? runtime
        }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return xdg + "/bletransfer" }
        return "/tmp/bletransfer-\(getuid())"
    }

    /// Every record readable here whose process lives: ours, the service's (/run/bletransfer), for root every user's.
    package static func all() -> [Entry] {
        var directories = [ownDirectory(), "/run/bletransfer"]
        if getuid() == 0 {
            let users = (try? FileManager.default.contentsOfDirectory(atPath: "/run/user")) ?? []
            directories += users.map { "/run/user/\($0)/bletransfer" }
            let temporary = (try? FileManager.default.contentsOfDirectory(atPath: "/tmp")) ?? []
            directories += temporary.filter { $0.hasPrefix("bletransfer-") }.map { "/tmp/\($0)" }
        }
        var entries: [Entry] = []
        for directory in Set(directories) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            for name in names where name.hasPrefix("links-") && name.hasSuffix(".json") {
                guard let data = FileManager.default.contents(atPath: directory + "/" + name),
                      let entry = try? JSONDecoder().decode(Entry.self, from: data),
                      kill(pid_t(entry.pid), 0) == 0 || errno == EPERM else { continue }
                entries.append(entry)
            }
        }
        return entries.sorted { $0.pid < $1.pid }
    }
}
