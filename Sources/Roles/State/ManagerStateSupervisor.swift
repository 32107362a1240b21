import BlueZ
import Machines
import ServiceLifecycle
import Transfer

/// Follows the manager state for a role: one period of work for each time the adapter is `poweredOn`, started on
/// ``RoleAction/start`` / ``RoleAction/resume`` and cancelled (and awaited) on ``RoleAction/tearDown``. What a
/// transition or a period's outcome means — checks of the first state, warnings, when the run is done — stays with
/// the role, in the closures it passes to ``run(transitionSeen:adapterMissing:periodWork:periodEnded:stopped:)``.
///
/// A stop (``GracefulStop``) ends the run gracefully: no new period starts, the running one sees the same request and
/// ends by itself, teardown included, and is cancelled only if it has not ended within ``stopGrace``.
struct ManagerStateSupervisor<PeriodOutcome: Sendable>: Sendable {
    let driver: ManagerStateDriver
    /// How long a period has, once a stop is asked for, to end by itself before it is cancelled (its teardown's
    /// calls to bluetoothd are bounded each; this bounds them together).
    var stopGrace: Duration = .seconds(30)

    /// What the supervision had seen before the transition at hand.
    struct History: Sendable {
        /// The transition at hand is the first: the state the role found at start.
        var isFirstTransition = true
        /// A period's work was started before (the adapter has been usable).
        var hasStartedPeriod = false
    }

    private enum Control: Sendable {
        case transition(ManagerTransition)
        case stateStreamEnded
        case periodEnded(generation: Int, PeriodOutcome)
        case stopRequested
        /// The period of this generation has not ended within ``stopGrace`` of the stop.
        case stopOverdue(generation: Int)
    }

    /// Follows the transitions until `periodEnded` has a result, a stop is asked for, the state stream ends, or the
    /// run is cancelled. However it ends, the running period has ended first: by itself after a stop (cancelled after
    /// ``stopGrace``), cancelled otherwise.
    ///
    /// - Parameters:
    ///   - transitionSeen: the role's part of each transition, before the supervisor acts on it (so what it reports
    ///     comes before anything the period does); a throw ends the run.
    ///   - adapterMissing: `poweredOn`, but the driver finds no adapter to work on; no period until the next start.
    ///   - periodWork: one `poweredOn` period's work on the adapter, until it returns or is cancelled.
    ///   - periodEnded: what a period's outcome means: a result ends the run with it, nil waits for the next
    ///     `poweredOn` period, a throw ends the run.
    ///   - stopped: the result of a run ended by a stop (after the period's own outcome, if one was running, had no
    ///     result of its own).
    /// - Throws: what the role's closures throw; a ``RoleFailure`` when the state stream ends (the system bus is
    ///   gone); `CancellationError` when cancelled.
    func run<Result>(
        transitionSeen: (ManagerTransition, History) throws -> Void,
        adapterMissing: () -> Void = {},
        periodWork: @escaping @Sendable (Adapter) async -> PeriodOutcome,
        periodEnded: (PeriodOutcome) async throws -> Result?,
        stopped: () async -> Result
    ) async throws -> Result {
        let driver = self.driver
        let (controls, control) = AsyncStream<Control>.makeStream()
        return try await withThrowingDiscardingTaskGroup { group in
            // A child for the run's whole length: merges the state transitions into the control stream.
            group.addTask {
                for await transition in driver.transitions() {
                    control.yield(.transition(transition))
                }
                // A cancelled run ends as cancelled, not as a lost bus.
                if !Task.isCancelled { control.yield(.stateStreamEnded) }
            }
            defer {
                group.cancelAll()
                control.finish()
            }
            var periods = Periods(control: control, work: periodWork)
            do {
                return try await withGracefulShutdownHandler {
                    try await follow(
                        controls, periods: &periods, group: &group, transitionSeen: transitionSeen,
                        adapterMissing: adapterMissing, periodEnded: periodEnded, stopped: stopped)
                } onGracefulShutdown: {
                    control.yield(.stopRequested)
                }
            } catch {
                await periods.stop()
                throw error
            }
        }
    }

    /// The run's loop: each control in turn, until one ends the run.
    private func follow<Result>(
        _ controls: AsyncStream<Control>,
        periods: inout Periods,
        group: inout ThrowingDiscardingTaskGroup<any Error>,
        transitionSeen: (ManagerTransition, History) throws -> Void,
        adapterMissing: () -> Void,
        periodEnded: (PeriodOutcome) async throws -> Result?,
        stopped: () async -> Result
    ) async throws -> Result {
        let stopGrace = self.stopGrace
        var history = History()
        var stopping = false
        for await item in controls {
            switch item {
            case .transition(let transition):
                try transitionSeen(transition, history)
                history.isFirstTransition = false
                switch transition.action {
                case .start, .resume:
                    // The table tears a period down before the next start; one still
                    // running here would belong to a state already left.
                    await periods.stop()
                    if stopping { return await stopped() }
                    guard let adapter = driver.currentAdapter() else {
                        adapterMissing()
                        continue
                    }
                    history.hasStartedPeriod = true
                    periods.start(on: adapter)
                case .tearDown:
                    await periods.stop()
                    if stopping { return await stopped() }
                case .none: break
                }
            case .periodEnded(let ended, let outcome):
                // An outcome from a period already torn down says nothing about now.
                guard ended == periods.running?.generation else { continue }
                await periods.stop()  // it has ended: this only waits for its task to finish
                if let result = try await periodEnded(outcome) { return result }
                if stopping { return await stopped() }
            case .stopRequested:
                stopping = true
                guard let current = periods.running else { return await stopped() }
                // The period sees the stop itself; this bounds how long it may take.
                let control = periods.control
                group.addTask {
                    try? await Task.sleep(for: stopGrace)
                    control.yield(.stopOverdue(generation: current.generation))
                }
            case .stopOverdue(let overdue):
                guard overdue == periods.running?.generation else { continue }
                await periods.stop()
                return await stopped()
            case .stateStreamEnded:
                throw RoleFailure(.unavailable, "lost the connection to the D-Bus system bus")
            }
        }
        // The control stream ends only when the run is cancelled.
        throw CancellationError()
    }

    /// The period of work now running, if any: at most one, each with a generation of its own so that an
    /// outcome or a deadline meant for one already gone is told apart.
    private struct Periods {
        let control: AsyncStream<Control>.Continuation
        let work: @Sendable (Adapter) async -> PeriodOutcome
        var generation = 0
        var running: (generation: Int, task: Task<Void, Never>)?

        mutating func start(on adapter: Adapter) {
            generation += 1
            let current = generation, control = control, work = work
            // Unstructured: the loop cancels one period while the run goes on, which a task group cannot do to one child.
            let task = Task {
                let outcome = await work(adapter)
                control.yield(.periodEnded(generation: current, outcome))
            }
            running = (current, task)
        }

        /// Cancels the running period, if any, and waits for its task to finish.
        mutating func stop() async {
            guard let current = running else { return }
            running = nil
            current.task.cancel()
            await current.task.value
        }
    }
}
