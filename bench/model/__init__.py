"""Models of a server, fitted from its measured costs: the queue model of batching under open-loop load."""
