"""What sacctmgr prints for a change: Slurm 22.05's lines for the change set the controller
answers with (controller/assoc_changes.py's `ChangeSet.to_dict()`), byte for byte.

Imports stay light (the command's start): plain dicts in, text out.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# sacctmgr_print_assoc_limits' order and labels (a setting's name → its label)
SETTING_LABELS = [
    ("Fairshare", "Fairshare"), ("GrpJobs", "GrpJobs"), ("GrpSubmitJobs", "GrpSubmitJobs"),
    ("GrpTRES", "GrpTRES"), ("GrpTRESMins", "GrpTRESMins"), ("GrpTRESRunMins", "GrpTRESRunMins"),
    ("GrpWall", "GrpWall"), ("MaxJobs", "MaxJobs"), ("MaxSubmitJobs", "MaxSubmitJobs"),
    ("MaxTRES", "MaxTRES"), ("MaxTRESPerNode", "MaxTRESPerNode"), ("MaxTRESMins", "MaxTRESMins"),
    ("MaxWall", "MaxWall"), ("QOS", "QOS"), ("DefQOS", "DefQOS"),
]

NOTHING = {"add": " Nothing new added.\n", "modify": " Nothing modified\n",
           "delete": " Nothing deleted\n"}


def _lines(items: list[str]) -> str:
    return "".join(f"  {x}\n" for x in items)


def settings_lines(settings: dict[str, str]) -> str:
    """The settings a change gives, one per line: `  GrpTRES       = cpu=4`."""
    return "".join(f"  {label:<14}= {settings[name]}\n"
                   for name, label in SETTING_LABELS if name in settings)


def user_assoc_line(a: dict[str, Any]) -> str:
    """A user association as sacctmgr names it in `modify/delete user`."""
    text = f"C = {a['cluster']:<10} A = {a['account']:<20} U = {a['user'] or '':<9}"
    return text + f" P = {a['partition']}" if a.get("partition") else text


def render_changes(c: dict[str, Any]) -> str:
    """The text sacctmgr prints for a change set (a dict of ChangeSet's fields)."""
    op, entity = str(c["op"]), str(c["entity"])
    if op == "load":
        return f" Loaded cluster {_names(c)[0]}: {c['assoc_count']} associations\n"
    if entity == "cluster" and op == "add":
        return _add_cluster(c)
    if not c.get("changed"):
        if entity == "coordinator" and op == "delete":
            return " Nothing removed\n"
        return NOTHING[op]
    render = _RENDERERS.get((op, entity))
    if render is not None:
        return render(c)
    plural = {"cluster": "clusters", "account": "accounts", "user": "users",
              "qos": "QOS(s)"}[entity]
    if op == "delete":
        return f" Deleting {plural}...\n" + _lines(_names(c))
    return f" Modified {entity}...\n" + _lines(_names(c))  # modify cluster, modify qos


def _names(c: dict[str, Any]) -> list[str]:
    return [str(n) for n in c.get("names") or ()]


def _assocs(c: dict[str, Any]) -> list[dict[str, Any]]:
    return list(c.get("assocs") or ())


def _add_cluster(c: dict[str, Any]) -> str:
    exists = "".join(f" This cluster {n} already exists.  Not adding.\n"
                     for n in c.get("existing") or ())
    if not c.get("changed"):
        return exists + NOTHING["add"]
    return exists + " Adding Cluster(s)\n" + "".join(f"  Name           = {n}\n"
                                                    for n in _names(c))


def _add_account(c: dict[str, Any]) -> str:
    text = ""
    if _names(c):
        descr, org = c.get("description"), c.get("organization")
        text += (f" Adding Account(s)\n{_lines(_names(c))} Settings\n"
                 f"  Description     = {descr if descr is not None else 'Account Name'}\n"
                 f"  Organization    = {org if org is not None else 'Parent/Account Name'}\n")
    text += " Associations\n" + "".join(f"  A = {str(a['account'])[:10]:<10} "
                                        f"C = {str(a['cluster'])[:10]:<10}\n"
                                        for a in _assocs(c))
    settings = settings_lines(c.get("settings") or {})
    return text + (" Settings\n" + settings if settings else "")


def _add_user(c: dict[str, Any]) -> str:
    text = ""
    if _names(c):
        text += f" Adding User(s)\n{_lines(_names(c))}"
        default, admin = c.get("default_account"), c.get("admin_level")
        if default or admin:
            text += " Settings =\n"
        if default:
            text += f"  Default Account = {default}\n"
        if admin:
            text += f"  Admin Level     = {admin}\n"
    assocs = _assocs(c)
    if assocs:
        text += " Associations =\n"
        for a in assocs:
            user, acct, cl = str(a["user"])[:9], str(a["account"])[:10], str(a["cluster"])[:10]
            part = a.get("partition")
            text += (f"  U = {user:<9} A = {acct:<10} C = {cl:<10} P = {str(part)[:10]:<10}\n"
                     if part else f"  U = {user:<9} A = {acct:<10} C = {cl:<10}\n")
    settings = settings_lines(c.get("settings") or {})
    return text + (" Non Default Settings\n" + settings if settings else "")


def _add_qos(c: dict[str, Any]) -> str:
    descr = c.get("description")
    # sacctmgr_print_qos_limits' lines, MaxJobsPerUser's unpadded as Slurm prints it
    limits = "".join(f"  {label} = {value}\n" if label == "MaxJobsPerUser"
                     else f"  {label:<25}= {value}\n"
                     for label, value in (c.get("settings") or {}).items())
    return (" Adding QOS(s)\n" + _lines(_names(c)) + " Settings\n"
            + f"  Description    = {descr if descr is not None else 'QOS Name'}\n" + limits)


def _add_coordinator(c: dict[str, Any]) -> str:
    pairs = list(c.get("coordinators") or ())
    users = _names(c)
    # the pairs run account by account for each user: the first user's are the accounts
    accounts = [str(a) for _, a in pairs[:len(pairs) // len(users)]] if users else []
    return (" Adding Coordinator User(s)\n" + _lines(_names(c))
            + " To Account(s) and all sub-accounts\n" + _lines(accounts))


def _modify_account(c: dict[str, Any]) -> str:
    text = ""
    if c.get("record_change_asked"):
        text += " Modified accounts...\n" + _lines(_names(c))
    if c.get("assoc_change_asked"):
        text += " Modified account associations...\n" + "".join(
            f"  C = {a['cluster']:<10} A = {a['account']} of {a['parent']}\n" if a.get("parent")
            else f"  C = {a['cluster']:<10} A = {a['account']}\n" for a in _assocs(c))
    return text


def _modify_user(c: dict[str, Any]) -> str:
    text = ""
    if c.get("record_change_asked"):
        text += " Modified users...\n" + _lines(_names(c))
    if c.get("assoc_change_asked"):
        assocs = _assocs(c)
        if not assocs:
            return text + NOTHING["modify"]
        text += " Modified user associations...\n" + _lines([user_assoc_line(a) for a in assocs])
    return text


def _delete_user(c: dict[str, Any]) -> str:
    if _names(c):  # the users themselves, with all their associations
        return " Deleting users...\n" + _lines(_names(c))
    return " Deleting user associations...\n" + _lines([user_assoc_line(a) for a in _assocs(c)])


def _delete_coordinator(c: dict[str, Any]) -> str:
    pairs = list(c.get("coordinators") or ())
    return " Removed Coordinators (sub accounts not listed)...\n" + "".join(
        f"  U = {u:<9} A = {a:<10}\n" for u, a in pairs)


_RENDERERS = {
    ("add", "account"): _add_account, ("add", "user"): _add_user, ("add", "qos"): _add_qos,
    ("add", "coordinator"): _add_coordinator, ("modify", "account"): _modify_account,
    ("modify", "user"): _modify_user, ("delete", "user"): _delete_user,
    ("delete", "coordinator"): _delete_coordinator,
}
