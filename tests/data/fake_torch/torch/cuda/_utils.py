"""torch.cuda._utils of the stand-in."""


def _get_device_index(device, optional=False, allow_cpu=False):
    if device is None:
        return 0 if not optional else 0
    text = str(device)
    if text.startswith("cuda"):
        return int(text.split(":", 1)[1]) if ":" in text else 0
    return int(device)
