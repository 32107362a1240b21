package enum RoleAction: String, Sendable, Hashable, CaseIterable, Codable {
    case none
    /// Entered `poweredOn` for the first time: register, advertise / scan.
    case start
    /// Entered `poweredOn` again after a tear-down: start afresh (the message from byte 0; scan again).
    case resume
    /// Left `poweredOn`: stop advertising / scanning, drop connections and sessions, release
    /// exported objects; BlueZ may already be gone, so those calls may fail.
    case tearDown
}

package struct ManagerTransition: Sendable, Hashable {
    package var from: ManagerState
    package var to: ManagerState
    package var action: RoleAction
    package var event: ManagerEvent
    /// Why the machine is in `to`; nil in `poweredOn`.
    package var reason: ManagerStateReason?

    package var changed: Bool { from != to }
}

/// CoreBluetooth's manager states computed from what BlueZ reports, driven by ``ManagerTransitionTable``.
package struct ManagerStateMachine: Sendable {
    package let requirement: RoleRequirement
    package private(set) var state: ManagerState = .unknown
    /// Why the state is not `poweredOn` (nil before anything is known and in `poweredOn`).
    package private(set) var reason: ManagerStateReason?
    /// True once the role was started; a later start is reported as ``RoleAction/resume``.
    package private(set) var hasStarted = false

    package init(role requirement: RoleRequirement) {
        self.requirement = requirement
    }

    @discardableResult
    package mutating func handle(_ input: ManagerInput) -> ManagerTransition {
        let event = ManagerEvent(input, requirement: requirement)
        let from = state
        let entry = ManagerTransitionTable.entry(from: from, on: event)
        var action = entry.action
        if action == .start {
            if hasStarted { action = .resume }
            hasStarted = true
        }
        if !entry.ignored {
            state = entry.next
            reason = event.reason
        }
        return ManagerTransition(from: from, to: state, action: action, event: event, reason: reason)
    }
}
