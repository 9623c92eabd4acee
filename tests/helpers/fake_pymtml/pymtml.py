"""A stand-in for pymtml (MooreThreads/mthreads-ml-py) with the MtLink and topology calls the
device seam uses, over a made-up host: ``DEVICES`` devices, MtLink links that are up between
the pairs in ``LINKS`` (each device has ``LINKS_PER_DEVICE`` link slots; unused ones are down).
Tests set the two module attributes; ``calls`` records the calls made."""

MTML_MTLINK_STATE_DOWN = 0
MTML_MTLINK_STATE_UP = 1
MTML_MTLINK_STATE_DOWNGRADE = 2
MTML_TOPOLOGY_INTERNAL = 0
MTML_TOPOLOGY_SINGLE = 1
MTML_TOPOLOGY_NODE = 4
MTML_TOPOLOGY_SYSTEM = 5

DEVICES = 4
LINKS = [(0, 1), (2, 3)]  # two MtLink islands
LINKS_PER_DEVICE = 3
calls = []


class MTMLError(Exception):
    pass


class _Spec:
    def __init__(self, link_num):
        self.version, self.bandWidth, self.linkNum = 10000, 240, link_num


def mtmlLibraryInit():
    calls.append("mtmlLibraryInit")


def mtmlLibraryShutDown():
    calls.append("mtmlLibraryShutDown")


def mtmlLibraryCountDevice():
    return DEVICES


def mtmlLibraryInitDeviceByIndex(index):
    if not 0 <= index < DEVICES:
        raise MTMLError("invalid device index")
    return index


def mtmlLibraryInitDeviceByUuid(uuid):
    for i in range(DEVICES):
        if mtmlDeviceGetUUID(i).decode() == uuid:
            return i
    raise MTMLError("no such device")


def mtmlDeviceGetUUID(device):
    return f"GPU-fake-{device:04d}".encode()


def _peers(device):
    return [b if a == device else a for a, b in LINKS if device in (a, b)]


def mtmlDeviceGetMtLinkSpec(device):
    calls.append(("spec", device))
    return _Spec(LINKS_PER_DEVICE)


def mtmlDeviceGetMtLinkState(device, link):
    return MTML_MTLINK_STATE_UP if link < len(_peers(device)) else MTML_MTLINK_STATE_DOWN


def mtmlDeviceGetMtLinkRemoteDevice(device, link):
    peers = _peers(device)
    if link >= len(peers):
        raise MTMLError("link down")
    return peers[link]


def mtmlDeviceGetTopologyLevel(dev1, dev2):
    return MTML_TOPOLOGY_SINGLE if dev1 // 2 == dev2 // 2 else MTML_TOPOLOGY_SYSTEM
